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
//! from its first character to its last. No tree of it is ever built; JSON
//! data nested deeper than [`validate::MAX_DATA_DEPTH`] is refused.

use std::io::BufRead;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use serde::Serialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::store::NewItem;
use crate::store::export::ExportedItem;
use crate::validate::{self, shown};
use crate::{Error, Result};

/// What a line may hold, for error messages.
const EXPECTED: &str = "expected {\"id\"?: string, \"gate\"?: int, \"data\": any}, \
     with \"data_base64\" for data that is not JSON, \"not_before\" (epoch ms or RFC 3339) or \
     \"delay\" (\"10m\") for a later time, \"traceparent\" for the producer's trace (or use --raw)";

/// Fields `processor export` writes beside the item: read and ignored, so
/// that its output enqueues as it is (the items start over as available).
const EXPORTED: [&str; 4] = ["status", "attempts", "last_error", "parent_id"];

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
        validate::data_depth(line.as_bytes())?;
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
    validate::data_depth(&bytes)?;
    let mut item = NewItem::new(bytes);
    item.schedule = crate::schedule::of_line(fields.not_before, fields.delay)?;
    if let Some(tp) = fields.traceparent.filter(|v| v.get() != "null") {
        let tp: String = serde_json::from_str(tp.get())
            .map_err(|_| "traceparent must be a string".to_string())?;
        item.traceparent = Some(crate::validate::traceparent(&tp)?);
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
            Err(_) => {
                return Err(format!(
                    "gate must be an integer, not {}",
                    shown(gate.get())
                ));
            }
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
                        "field `{}` is given twice; give each field once",
                        shown(&key)
                    ));
                } else if slot_known(&key) {
                    seen.push(key);
                } else {
                    e.problem = Some(format!("unknown field `{}`; {EXPECTED}", shown(&key)));
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
/// `status`, `attempts`, `last_error`, `parent_id` when an answer spawned
/// it, `not_before` when it has one (epoch
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
        parent_id: Option<&'a str>,
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
        parent_id: item.parent_id.as_deref(),
        not_before: item.not_before,
        data_base64: data.is_none().then(|| BASE64.encode(&item.data)),
        data,
    };
    serde_json::to_string(&line).expect("a line of strings, numbers and valid JSON")
}

/// One of a fan-in handler's inputs as a JSON line: `{"id", "gate",
/// "status", "data"}`, the data embedded as an export embeds it (or
/// `data_base64` in its place).
pub fn input_line(item: &ExportedItem) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        id: &'a str,
        gate: i64,
        status: &'a str,
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
mod tests;
