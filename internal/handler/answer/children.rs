//! An answer's `"items"`: the children a step spawns into its partition,
//! each one's data kept as a slice of the answer's body.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::Child;
use crate::validate::{self, MAX_GATE, shown};

/// Children one answer spawns at most: a step that finds more spawns
/// them over several steps (answering `done: false`), or a producer
/// enqueues them.
const MAX_CHILDREN: usize = 10_000;

/// One element of `"items"`, as sent.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    gate: Option<&'a RawValue>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

/// Reads `"items"` (a slice of `body`) into children, or says what is
/// wrong with it and what to send instead.
pub(super) fn children(items: &RawValue, body: &Bytes) -> Result<Vec<Child>, String> {
    let text = items.get();
    if text == "null" {
        return Ok(Vec::new());
    }
    let list = serde_json::from_str::<Vec<&RawValue>>(text).map_err(|_| {
        format!(
            "handler answered \"items\": {}; it must be an array of {{\"id\"?, \"gate\"?, \"data\"}}",
            shown(text)
        )
    })?;
    if list.len() > MAX_CHILDREN {
        return Err(format!(
            "handler answered {} items in one answer; an answer spawns at most {MAX_CHILDREN}: \
             spawn the rest at the next step (answer \"done\": false) or enqueue them",
            list.len()
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(n, raw)| child(n, raw, body))
        .collect()
}

/// A field that was sent and is not `null`.
fn present(v: Option<&RawValue>) -> Option<&RawValue> {
    v.filter(|v| v.get() != "null")
}

/// Element `n` of `"items"`.
fn child(n: usize, raw: &RawValue, body: &Bytes) -> Result<Child, String> {
    let text = raw.get();
    let fields = text
        .starts_with('{')
        .then(|| serde_json::from_str::<Raw>(text).ok())
        .flatten()
        .ok_or_else(|| {
            format!(
                "handler answered items[{n}]: {}; each item must be an object {{\"id\"?, \"gate\"?, \"data\"}}",
                shown(text)
            )
        })?;
    let id = match present(fields.id) {
        None => None,
        Some(v) => {
            let id = serde_json::from_str::<String>(v.get()).map_err(|_| {
                format!(
                    "handler answered items[{n}].id: {}; it must be a string",
                    shown(v.get())
                )
            })?;
            validate::id("spawned item id", &id)
                .map_err(|e| format!("handler answered items[{n}]: {e}"))?;
            Some(id)
        }
    };
    let gate = match present(fields.gate) {
        None => None,
        Some(v) => match serde_json::from_str::<i64>(v.get()) {
            Ok(g) if (0..=MAX_GATE).contains(&g) => Some(g),
            _ => {
                return Err(format!(
                    "handler answered items[{n}].gate: {}; it must be an integer from 0 to 2^53",
                    shown(v.get())
                ));
            }
        },
    };
    let data = match fields.data {
        Some(d) => body.slice_ref(d.get().as_bytes()),
        None => Bytes::from_static(b"null"),
    };
    Ok(Child { id, gate, data })
}
