//! The JSON-lines item format: what producers feed to `processor enqueue`
//! (one item per line, `{"id"?: string, "gate"?: int, "data": any}`, with
//! `data_base64` for data that is not JSON, or with `raw` each line is an
//! item's data as it is; blank lines are skipped), and what `processor
//! export` writes, which `enqueue` reads back.

use std::io::BufRead;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::store::NewItem;
use crate::store::export::ExportedItem;
use crate::{Error, Result};

/// What a line may hold, for error messages.
const EXPECTED: &str = "expected {\"id\"?: string, \"gate\"?: int, \"data\": any}, \
     with \"data_base64\" for data that is not JSON (or use --raw)";

/// Fields `processor export` writes beside the item: read and ignored, so
/// that its output enqueues as it is (the items start over as available).
const EXPORTED: [&str; 3] = ["status", "attempts", "last_error"];

/// Reads every item of `input`, calling `on_line` once per line read (for
/// a progress display). The first bad line fails the whole read, naming its
/// line number, so that nothing is written.
pub fn read(input: impl BufRead, raw: bool, mut on_line: impl FnMut()) -> Result<Vec<NewItem>> {
    let mut items = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| Error::Invalid(format!("reading line {}: {e}", n + 1)))?;
        on_line();
        if line.trim().is_empty() {
            continue;
        }
        let item = parse(&line, raw)
            .map_err(|e| Error::Invalid(format!("line {}: {e}; nothing was written", n + 1)))?;
        items.push(item);
    }
    Ok(items)
}

/// One line: `{"id"?, "gate"?, "data"}` (or `"data_base64"`), or with
/// `raw` the data itself.
pub fn parse(line: &str, raw: bool) -> std::result::Result<NewItem, String> {
    if raw {
        return Ok(NewItem::new(line.as_bytes().to_vec()));
    }
    let value: Value = serde_json::from_str(line).map_err(|e| {
        let what = e.to_string().replace(" at line 1 column", " at column");
        format!("{what}; {EXPECTED}")
    })?;
    let Value::Object(mut fields) = value else {
        return Err(format!("not a JSON object; {EXPECTED}"));
    };
    if let Some(k) = fields.keys().find(|k| {
        !["id", "gate", "data", "data_base64"].contains(&k.as_str())
            && !EXPORTED.contains(&k.as_str())
    }) {
        return Err(format!("unknown field `{k}`; {EXPECTED}"));
    }
    let data = match (fields.remove("data"), fields.remove("data_base64")) {
        (Some(d), None) => serde_json::to_vec(&d).map_err(|e| e.to_string())?,
        (None, Some(Value::String(b))) => BASE64
            .decode(b.as_bytes())
            .map_err(|e| format!("data_base64 is not base64: {e}"))?,
        (None, Some(_)) => return Err("data_base64 must be a string".into()),
        (Some(_), Some(_)) => return Err("give data or data_base64, not both".into()),
        (None, None) => return Err(format!("missing field `data`; {EXPECTED}")),
    };
    let mut item = NewItem::new(data);
    match fields.remove("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) => item = item.with_id(id),
        Some(_) => return Err("id must be a string".into()),
    }
    match fields.remove("gate") {
        None | Some(Value::Null) => {}
        Some(g) => match g.as_i64() {
            Some(g) if g >= 0 => item = item.at_gate(g),
            Some(_) => return Err("gate must not be negative".into()),
            None => return Err(format!("gate must be an integer, not {g}")),
        },
    }
    Ok(item)
}

/// One exported item as a JSON line (without the newline): `id`, `gate`,
/// `status`, `attempts`, `last_error`, and `data` when the data is JSON,
/// else `data_base64`.
pub fn export_line(item: &ExportedItem) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        id: &'a str,
        gate: i64,
        status: &'a str,
        attempts: i32,
        last_error: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Box<RawValue>>,
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
        data_base64: data.is_none().then(|| BASE64.encode(&item.data)),
        data,
    };
    serde_json::to_string(&line).expect("a line of strings, numbers and valid JSON")
}

/// The data as it is when it is JSON on one line, re-written on one line
/// when it spans several; None when it is not JSON.
fn json_data(data: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(data).ok()?.trim();
    if text.contains(['\n', '\r']) {
        let v: Value = serde_json::from_str(text).ok()?;
        return RawValue::from_string(v.to_string()).ok();
    }
    RawValue::from_string(text.to_string()).ok()
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
        assert_eq!(
            (items[0].id.as_deref(), items[0].gate),
            (Some("a"), Some(2))
        );
        assert_eq!(items[0].data, br#"{"x":1}"#.to_vec());
        assert_eq!((items[1].id.as_deref(), items[1].gate), (None, None));
        let raw = read("not json\n".as_bytes(), true, || {}).unwrap();
        assert_eq!(raw[0].data, b"not json".to_vec());
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
            data: data.to_vec(),
        }
    }

    #[test]
    fn exported_lines_enqueue_as_they_are() {
        let cases: [(&[u8], &str); 4] = [
            (
                br#"{"b":1,"a":[true,null]}"#,
                r#""data":{"b":1,"a":[true,null]}"#,
            ),
            (b"{\n  \"x\": 1\n}\n", r#""data":{"x":1}"#),
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
            let same = serde_json::from_slice::<Value>(data).ok();
            match same {
                Some(v) => assert_eq!(serde_json::from_slice::<Value>(&item.data).unwrap(), v),
                None => assert_eq!(item.data, data),
            }
        }
        let both = parse(r#"{"data": 1, "data_base64": "AA=="}"#, false);
        assert!(both.unwrap_err().contains("not both"));
        assert!(
            parse(r#"{"data_base64": "%%"}"#, false)
                .unwrap_err()
                .contains("not base64")
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
        assert_eq!(parse(r#"{"data": null}"#, false).unwrap().data, b"null");
    }
}
