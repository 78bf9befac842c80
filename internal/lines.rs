//! The JSON-lines item format: what producers feed to `processor enqueue`
//! (one item per line, `{"id"?: string, "gate"?: int, "data": any}`, with
//! `data_base64` for data that is not JSON, `not_before` or `delay` for an
//! item that must not run before a time (see `schedule`), `traceparent` for
//! the producer's trace (see `otel`), or with `raw`
//! each line is an item's data as it is; blank lines are skipped), and
//! what `processor export` writes, which `enqueue` reads back.
//!
//! An item's data is kept byte for byte: the JSON text of `data` exactly as
//! sent (its big numbers, key order, duplicate keys and inner whitespace),
//! from its first character to its last. No tree of it is ever built.

use std::io::BufRead;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use serde::Serialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::store::NewItem;
use crate::store::export::ExportedItem;
use crate::{Error, Result};

/// What a line may hold, for error messages.
const EXPECTED: &str = "expected {\"id\"?: string, \"gate\"?: int, \"data\": any}, \
     with \"data_base64\" for data that is not JSON, \"not_before\" (epoch ms or RFC 3339) or \
     \"delay\" (\"10m\") for a later time, \"traceparent\" for the producer's trace (or use --raw)";

/// Fields `processor export` writes beside the item: read and ignored, so
/// that its output enqueues as it is (the items start over as available).
const EXPORTED: [&str; 3] = ["status", "attempts", "last_error"];

/// Reads every item of `input` with the number of the line it came from
/// (from 1), calling `on_line` once per line read (for a progress
/// display). The first bad line fails the whole read, naming its line
/// number, so that nothing is written.
pub fn read(
    input: impl BufRead,
    raw: bool,
    mut on_line: impl FnMut(),
) -> Result<Vec<(usize, NewItem)>> {
    let mut items = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| Error::Invalid(format!("reading line {}: {e}", n + 1)))?;
        on_line();
        if line.trim().is_empty() {
            continue;
        }
        let item = parse(&line, raw)
            .map_err(|e| Error::Invalid(format!("line {}: {e}; nothing was written", n + 1)))?;
        items.push((n + 1, item));
    }
    Ok(items)
}

/// One line: `{"id"?, "gate"?, "data"}` (or `"data_base64"`), or with
/// `raw` the data itself. The data is copied out of `line`.
pub fn parse(line: &str, raw: bool) -> std::result::Result<NewItem, String> {
    if raw {
        return Ok(NewItem::new(line.as_bytes().to_vec()));
    }
    item(line, |data| Bytes::copy_from_slice(data.as_bytes()))
}

/// [`parse`] for an item read out of `body` (`text` is a slice of it):
/// its data is a slice of `body`, not a copy.
pub(crate) fn parse_within(text: &str, body: &Bytes) -> std::result::Result<NewItem, String> {
    item(text, |data| body.slice_ref(data.as_bytes()))
}

/// An item from `text`; `data` makes the item's data of the JSON text of
/// its `data` field.
fn item(text: &str, data: impl FnOnce(&str) -> Bytes) -> std::result::Result<NewItem, String> {
    let fields: Envelope<'_> = serde_json::from_str(text).map_err(|e| {
        if e.classify() == serde_json::error::Category::Data {
            return format!("not a JSON object; {EXPECTED}");
        }
        let what = e.to_string().replace(" at line 1 column", " at column");
        format!("{what}; {EXPECTED}")
    })?;
    if let Some(problem) = fields.problem {
        return Err(problem);
    }
    let bytes = match (fields.data, fields.data_base64) {
        (Some(d), None) => data(d.get()),
        (None, Some(b)) => {
            let b: String = serde_json::from_str(b.get())
                .map_err(|_| "data_base64 must be a string".to_string())?;
            let decoded = BASE64
                .decode(b.as_bytes())
                .map_err(|e| format!("data_base64 is not base64: {e}"))?;
            Bytes::from(decoded)
        }
        (Some(_), Some(_)) => return Err("give data or data_base64, not both".into()),
        (None, None) => return Err(format!("missing field `data`; {EXPECTED}")),
    };
    let mut item = NewItem::new(bytes);
    item.schedule = crate::schedule::of_line(fields.not_before, fields.delay)?;
    if let Some(tp) = fields.traceparent.filter(|v| v.get() != "null") {
        let tp: String = serde_json::from_str(tp.get())
            .map_err(|_| "traceparent must be a string".to_string())?;
        item.traceparent = Some(crate::otel::traceparent(&tp)?);
    }
    if let Some(id) = fields.id.filter(|v| v.get() != "null") {
        let id: String =
            serde_json::from_str(id.get()).map_err(|_| "id must be a string".to_string())?;
        item = item.with_id(id);
    }
    if let Some(gate) = fields.gate.filter(|v| v.get() != "null") {
        match serde_json::from_str::<i64>(gate.get()) {
            Ok(g) if g >= 0 => item = item.at_gate(g),
            Ok(_) => return Err("gate must not be negative".into()),
            Err(_) => return Err(format!("gate must be an integer, not {}", gate.get())),
        }
    }
    Ok(item)
}

/// An item line's fields, each still the JSON text it was sent as, and the
/// first thing wrong with its keys (an unknown or repeated one).
#[derive(Default)]
struct Envelope<'a> {
    id: Option<&'a RawValue>,
    gate: Option<&'a RawValue>,
    data: Option<&'a RawValue>,
    data_base64: Option<&'a RawValue>,
    not_before: Option<&'a RawValue>,
    delay: Option<&'a RawValue>,
    traceparent: Option<&'a RawValue>,
    problem: Option<String>,
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an item object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut e = Envelope::default();
        let mut seen: Vec<String> = Vec::with_capacity(4);
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                "id" => Some(&mut e.id),
                "gate" => Some(&mut e.gate),
                "data" => Some(&mut e.data),
                "data_base64" => Some(&mut e.data_base64),
                "not_before" => Some(&mut e.not_before),
                "delay" => Some(&mut e.delay),
                "traceparent" => Some(&mut e.traceparent),
                _ => None,
            };
            match slot {
                Some(slot) => *slot = Some(map.next_value::<&'de RawValue>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if e.problem.is_none() {
                if seen.contains(&key) {
                    e.problem = Some(format!(
                        "field `{key}` is given twice; give each field once"
                    ));
                } else if slot_known(&key) {
                    seen.push(key);
                } else {
                    e.problem = Some(format!("unknown field `{key}`; {EXPECTED}"));
                }
            }
        }
        Ok(e)
    }
}

/// Whether an item line may hold the field `key`.
fn slot_known(key: &str) -> bool {
    [
        "id",
        "gate",
        "data",
        "data_base64",
        "not_before",
        "delay",
        "traceparent",
    ]
    .contains(&key)
        || EXPORTED.contains(&key)
}

/// One exported item as a JSON line (without the newline): `id`, `gate`,
/// `status`, `attempts`, `last_error`, `not_before` when it has one (epoch
/// milliseconds: it enqueues back with the same time), and `data` when
/// the data is JSON on one line (written as it is stored, byte for byte),
/// else `data_base64` (data that is not JSON, spans lines or has
/// whitespace around it), so that the line enqueues back to the very same
/// bytes.
pub fn export_line(item: &ExportedItem) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        id: &'a str,
        gate: i64,
        status: &'a str,
        attempts: i32,
        last_error: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        not_before: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data_base64: Option<String>,
    }
    let data = json_data(&item.data);
    let line = Line {
        id: &item.id,
        gate: item.gate,
        status: &item.status,
        attempts: item.attempts,
        last_error: item.last_error.as_deref(),
        not_before: item.not_before,
        data_base64: data.is_none().then(|| BASE64.encode(&item.data)),
        data,
    };
    serde_json::to_string(&line).expect("a line of strings, numbers and valid JSON")
}

/// The data as it is, when it is JSON that a line can carry unchanged: on
/// one line, without whitespace around it. None otherwise.
fn json_data(data: &[u8]) -> Option<&RawValue> {
    let text = std::str::from_utf8(data).ok()?;
    if text.contains(['\n', '\r']) || text.trim() != text {
        return None;
    }
    serde_json::from_str::<&RawValue>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let input = "{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}\n\n{\"data\": [1]}\n";
        let mut seen = 0;
        let items = read(input.as_bytes(), false, || seen += 1).unwrap();
        assert_eq!(seen, 3);
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].0, items[1].0), (1, 3), "line numbers");
        let (a, b) = (&items[0].1, &items[1].1);
        assert_eq!((a.id.as_deref(), a.gate), (Some("a"), Some(2)));
        assert_eq!(a.data, br#"{"x": 1}"#.to_vec());
        assert_eq!((b.id.as_deref(), b.gate), (None, None));
        let raw = read("not json\n".as_bytes(), true, || {}).unwrap();
        assert_eq!(raw[0].1.data, b"not json".to_vec());
    }

    #[test]
    fn bad_lines_name_their_number() {
        let e = read("{\"data\": 1}\n{\"dta\": 1}\n".as_bytes(), false, || {}).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("line 2: unknown field `dta`"), "{text}");
        assert!(text.ends_with("nothing was written"), "{text}");
        assert!(
            parse("{\"gate\": -1, \"data\": 0}", false)
                .unwrap_err()
                .contains("negative")
        );
        assert!(
            parse("[1]", false)
                .unwrap_err()
                .contains("expected {\"id\"?")
        );
    }

    fn exported(id: &str, data: &[u8]) -> ExportedItem {
        ExportedItem {
            seq: 1,
            id: id.into(),
            gate: 3,
            status: "failed".into(),
            attempts: 2,
            last_error: Some("boom \"quoted\"\nnext".into()),
            not_before: None,
            data: data.to_vec(),
        }
    }

    #[test]
    fn data_is_kept_byte_for_byte() {
        let data = r#"{"z":1, "big":12345678901234567890123,"f":1.10,"z":2,"e":"\u00e9"}"#;
        for line in [
            format!(r#"{{"data": {data}}}"#),
            format!("{{ \"id\" : \"a\" , \"data\" :\t{data}  }}"),
        ] {
            assert_eq!(parse(&line, false).unwrap().data, data.as_bytes());
        }
        // Escaped keys are the same keys.
        let item = parse(r#"{"d\u0061ta": [1.0]}"#, false).unwrap();
        assert_eq!(item.data, &b"[1.0]"[..]);
    }

    #[test]
    fn a_line_carries_its_producers_trace() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let item = parse(&format!(r#"{{"data": 1, "traceparent": "{tp}"}}"#), false).unwrap();
        assert_eq!(item.traceparent.as_deref(), Some(tp));
        let e = parse(r#"{"data": 1, "traceparent": "00-abc"}"#, false).unwrap_err();
        assert!(e.contains("is not a W3C traceparent"), "{e}");
        let e = parse(r#"{"data": 1, "traceparent": 7}"#, false).unwrap_err();
        assert_eq!(e, "traceparent must be a string");
        assert!(
            parse(r#"{"data": 1, "traceparent": null}"#, false)
                .unwrap()
                .traceparent
                .is_none()
        );
    }

    #[test]
    fn scheduled_lines_and_their_export() {
        use crate::store::Schedule;
        let at = parse(r#"{"data": 1, "not_before": 1893488400000}"#, false).unwrap();
        assert_eq!(at.schedule, Some(Schedule::At(1_893_488_400_000)));
        let after = parse(r#"{"delay": "10m", "data": 1}"#, false).unwrap();
        let ten = std::time::Duration::from_secs(600);
        assert_eq!(after.schedule, Some(Schedule::After(ten)));
        let e = read(
            "{\"data\": 1}\n{\"data\": 2, \"delay\": \"-1m\"}\n".as_bytes(),
            false,
            || {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("line 2: delay \"-1m\" is negative"), "{e}");
        let mut item = exported("i", b"1");
        item.not_before = Some(1_893_488_400_000);
        let line = export_line(&item);
        assert!(line.contains(r#""not_before":1893488400000"#), "{line}");
        let back = parse(&line, false).unwrap();
        assert_eq!(back.schedule, Some(Schedule::At(1_893_488_400_000)));
        assert!(!export_line(&exported("j", b"1")).contains("not_before"));
        let e = parse(r#"{"data": 1, "delay": "1m", "delay": "2m"}"#, false).unwrap_err();
        assert!(e.contains("`delay` is given twice"), "{e}");
    }

    #[test]
    fn repeated_fields_are_refused() {
        for line in [
            r#"{"data": 1, "data": 2}"#,
            r#"{"id": "a", "data": 1, "id": "b"}"#,
            r#"{"data": 1, "d\u0061ta": 2}"#,
            r#"{"data": 1, "status": "failed", "status": "complete"}"#,
        ] {
            let e = parse(line, false).unwrap_err();
            assert!(e.contains("is given twice"), "{line}: {e}");
        }
        // Repeated keys inside the data are the data's own business.
        assert!(parse(r#"{"data": {"a": 1, "a": 2}}"#, false).is_ok());
    }

    #[test]
    fn exported_lines_enqueue_as_they_are() {
        let cases: [(&[u8], &str); 6] = [
            (
                br#"{"b":1,"a":[true,null],"n":1.10}"#,
                r#""data":{"b":1,"a":[true,null],"n":1.10}"#,
            ),
            (br#"{"x": 1, "x": 2}"#, r#""data":{"x": 1, "x": 2}"#),
            // Lines or whitespace around the data: base64, which keeps them.
            (
                b"{\n  \"x\": 1\n}\n",
                r#""data_base64":"ewogICJ4IjogMQp9Cg==""#,
            ),
            (b" 1", r#""data_base64":"IDE=""#),
            (b"not json", r#""data_base64":"bm90IGpzb24=""#),
            (&[0xff, 0x00], r#""data_base64":"/wA=""#),
        ];
        for (data, shows) in cases {
            let line = export_line(&exported("i", data));
            assert!(!line.contains('\n'), "{line}");
            assert!(line.contains(shows), "{line}");
            assert!(line.contains(r#""status":"failed","attempts":2"#), "{line}");
            let item = parse(&line, false).unwrap();
            assert_eq!((item.id.as_deref(), item.gate), (Some("i"), Some(3)));
            assert_eq!(item.data, data, "{line}");
        }
        let both = parse(r#"{"data": 1, "data_base64": "AA=="}"#, false);
        assert!(both.unwrap_err().contains("not both"));
        assert!(
            parse(r#"{"data_base64": "%%"}"#, false)
                .unwrap_err()
                .contains("not base64")
        );
        assert!(
            parse(r#"{"data_base64": 1}"#, false)
                .unwrap_err()
                .contains("must be a string")
        );
        assert!(
            parse(r#"{"id": 1, "data": 1}"#, false)
                .unwrap_err()
                .contains("id must be a string")
        );
        assert!(
            parse(r#"{"gate": 1.5, "data": 1}"#, false)
                .unwrap_err()
                .contains("integer")
        );
        assert!(
            parse(r#"{"id": "x"}"#, false)
                .unwrap_err()
                .contains("missing field `data`")
        );
        assert_eq!(
            parse(r#"{"data": null}"#, false).unwrap().data,
            &b"null"[..]
        );
        let nulls = parse(r#"{"id": null, "gate": null, "data": 0}"#, false).unwrap();
        assert_eq!((nulls.id, nulls.gate), (None, None));
        let escaped = parse(r#"{"id": "a\u00e9", "data": 0}"#, false).unwrap();
        assert_eq!(escaped.id.as_deref(), Some("aé"));
    }
}
