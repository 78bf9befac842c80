//! The body of `POST /api/v1/partitions/{id}/items`: read into one buffer
//! of its own size, then split into items without a tree of any JSON
//! built: each item's data is a slice of that buffer (the bytes as sent),
//! and a bad item or one too many stops the reading at once.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::NewItem;

/// The largest body `POST /api/v1/partitions/{id}/items` reads: 16 MiB.
/// A larger one answers 413; split the items into several requests (each
/// is its own transaction).
pub const MAX_ENQUEUE_BODY_BYTES: usize = 16 << 20;

/// The most items one request may hold: what the slowest backend commits
/// in a fraction of a second (SQLite holds its one write lock meanwhile,
/// so dispatch waits that long), and what keeps a request's memory near
/// its body's size. More answer 413.
pub const MAX_ENQUEUE_ITEMS: usize = 10_000;

/// The enqueue bodies a console holds at once, in KiB: 32 MiB, two bodies
/// at the cap. A request takes its part as its bytes arrive, so a client
/// that announces a large body and sends it slowly holds only what it
/// sent; it gives it back with its answer. With the copies the database
/// drivers make while writing, that bounds what all enqueues together
/// hold to about 160 MiB.
const BUDGET_KIB: usize = 32 << 10;

/// What the requests of one token may announce at once, in KiB: half the
/// budget (one body at the cap), taken before any byte is read and all at
/// once, so that a token's requests never wait on each other half-read,
/// and one token cannot hold the whole budget.
const SHARE_KIB: usize = 16 << 10;

/// The room for enqueue bodies, shared by a console's requests.
pub(super) struct Budget {
    kib: Arc<Semaphore>,
    /// Each token's share, while it has requests in progress.
    shares: Mutex<BTreeMap<String, Arc<Semaphore>>>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            kib: Arc::new(Semaphore::new(BUDGET_KIB)),
            shares: Mutex::default(),
        }
    }
}

impl Budget {
    fn shares(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Semaphore>>> {
        self.shares
            .lock()
            .expect("the shares' lock is never poisoned")
    }
}

/// What a body holds of the budget and of its token's share until it is
/// dropped (with the answer).
pub(super) struct Held {
    budget: Arc<Budget>,
    holder: String,
    share: Option<OwnedSemaphorePermit>,
    kib: Option<OwnedSemaphorePermit>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(share) = self.share.take() else {
            return;
        };
        let semaphore = share.semaphore().clone();
        drop(share);
        let mut shares = self.budget.shares();
        // The map's own reference and this one: no request holds it.
        if Arc::strong_count(&semaphore) == 2 {
            shares.remove(&self.holder);
        }
    }
}

/// Why a body was refused: the status and what to say.
pub(super) type Refused = (StatusCode, String);

/// Reads the body of a request from `holder` (a token's id) into one
/// buffer, within `budget`: the [`Held`] returned holds the body's part
/// of it until dropped. The token's share is taken first, for the
/// announced size (the cap when it announces none), then the budget as
/// the bytes arrive. A body over [`MAX_ENQUEUE_BODY_BYTES`] is refused
/// once the cap is passed; one that announces such a size is read up to
/// there without being kept, so that a client that sends it all gets the
/// answer rather than a closed socket.
pub(super) async fn read(
    budget: &Arc<Budget>,
    headers: &HeaderMap,
    body: Body,
    holder: &str,
) -> Result<(Bytes, Held), Refused> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let most = announced
        .unwrap_or(MAX_ENQUEUE_BODY_BYTES)
        .min(MAX_ENQUEUE_BODY_BYTES);
    let share = budget
        .shares()
        .entry(holder.to_string())
        .or_insert_with(|| Arc::new(Semaphore::new(SHARE_KIB)))
        .clone();
    let mut held = Held {
        budget: budget.clone(),
        holder: holder.to_string(),
        share: None,
        kib: None,
    };
    held.share = Some(
        share
            .acquire_many_owned(kib(most))
            .await
            .expect("a share is never closed"),
    );
    let keep = announced.is_none_or(|n| n <= MAX_ENQUEUE_BODY_BYTES);
    let mut buf = Vec::with_capacity(match announced {
        Some(n) if keep => n.min(1 << 20),
        _ => 64 << 10,
    });
    let (mut body, mut seen) = (body, 0);
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| (StatusCode::BAD_REQUEST, format!("reading the body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen > MAX_ENQUEUE_BODY_BYTES {
            let message = format!(
                "the body is over the limit of {MAX_ENQUEUE_BODY_BYTES} bytes (16 MiB); \
                 split the items into several requests"
            );
            return Err((StatusCode::PAYLOAD_TOO_LARGE, message));
        }
        if keep {
            let had = held.kib.as_ref().map_or(0, |p| p.num_permits() as u32);
            let more = kib(seen) - had;
            if more > 0 {
                let permit = budget
                    .kib
                    .clone()
                    .acquire_many_owned(more)
                    .await
                    .expect("the budget is never closed");
                match &mut held.kib {
                    Some(p) => p.merge(permit),
                    None => held.kib = Some(permit),
                }
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok((Bytes::from(buf), held))
}

/// `bytes` in KiB, rounded up.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).expect("16 MiB in KiB fits")
}

/// The items of a body: a JSON array when its first non-whitespace byte
/// is `[`, else JSON lines (blank lines skipped). The first bad item fails
/// the whole body, naming it ("item N" of an array, "line N" of lines).
pub(super) fn parse(body: &Bytes) -> Result<Vec<NewItem>, Refused> {
    let bad = |message: String| (StatusCode::BAD_REQUEST, message);
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        bad(format!("line {line}: not UTF-8; nothing was written"))
    })?;
    let mut items = Vec::new();
    let mut add = |place: &str, text: &str| -> Result<(), Refused> {
        if items.len() == MAX_ENQUEUE_ITEMS {
            let message = format!(
                "the body holds more than {MAX_ENQUEUE_ITEMS} items; split them into several \
                 requests (each is its own transaction); nothing was written"
            );
            return Err((StatusCode::PAYLOAD_TOO_LARGE, message));
        }
        let item = crate::lines::parse_within(text, body).map_err(|e| {
            let e = e.replace(" (or use --raw)", "");
            bad(format!("{place}: {e}; nothing was written"))
        })?;
        items.push(item);
        Ok(())
    };
    if text.trim_start().starts_with('[') {
        let mut stopped = None;
        let mut de = serde_json::Deserializer::from_str(text);
        let visitor = Elements {
            each: |n: usize, element: &str| add(&format!("item {n}"), element),
            stopped: &mut stopped,
        };
        let read = de.deserialize_seq(visitor).and_then(|()| de.end());
        if let Some(refused) = stopped {
            return Err(refused);
        }
        read.map_err(|e| {
            bad(format!(
                "the body is not a JSON array of items: {e}; nothing was written"
            ))
        })?;
    } else {
        for (n, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                add(&format!("line {}", n + 1), line)?;
            }
        }
    }
    if items.is_empty() {
        return Err(bad(
            "the body holds no items; send a JSON array of items or JSON lines, \
             each {\"id\"?: string, \"gate\"?: int, \"data\": any}"
                .into(),
        ));
    }
    Ok(items)
}

/// Visits a JSON array's elements one at a time, each as its JSON text,
/// and stops at the first that `each` refuses (kept in `stopped`).
struct Elements<'s, F> {
    each: F,
    stopped: &'s mut Option<Refused>,
}

impl<'de, F: FnMut(usize, &'de str) -> Result<(), Refused>> Visitor<'de> for Elements<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of items")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut n = 0;
        while let Some(element) = seq.next_element::<&'de RawValue>()? {
            n += 1;
            if let Err(refused) = (self.each)(n, element.get()) {
                *self.stopped = Some(refused);
                return Err(serde::de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(body: &[u8]) -> Result<Vec<NewItem>, Refused> {
        parse(&Bytes::copy_from_slice(body))
    }

    fn message(body: &[u8]) -> String {
        items(body).unwrap_err().1
    }

    fn summary(items: &[NewItem]) -> Vec<(Option<&str>, Option<i64>, String)> {
        items
            .iter()
            .map(|i| {
                let data = String::from_utf8(i.data.to_vec()).unwrap();
                (i.id.as_deref(), i.gate, data)
            })
            .collect()
    }

    #[test]
    fn arrays_and_lines_read_alike() {
        let lines = "{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}\r\n\n  \n{\"data\": [1]}";
        let array = " \n[{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}, {\"data\": [1]}]\n";
        let want = vec![
            (Some("a"), Some(2), r#"{"x": 1}"#.to_string()),
            (None, None, "[1]".to_string()),
        ];
        assert_eq!(summary(&items(lines.as_bytes()).unwrap()), want);
        assert_eq!(summary(&items(array.as_bytes()).unwrap()), want);
        // One line holding an array of one item is an array.
        assert_eq!(items(b"[{\"data\": null}]").unwrap().len(), 1);
    }

    #[test]
    fn data_is_a_slice_of_the_body_as_sent() {
        let body = Bytes::from_static(
            b"[{\"data\": {\"z\":1,\"big\":12345678901234567890123,\"f\":1.10,\"z\":2} }]",
        );
        let item = &parse(&body).unwrap()[0];
        assert_eq!(
            &item.data[..],
            br#"{"z":1,"big":12345678901234567890123,"f":1.10,"z":2}"#
        );
        let inside = body.as_ptr_range();
        assert!(inside.contains(&item.data.as_ptr()), "a slice, not a copy");
    }

    #[test]
    fn bad_items_name_their_place() {
        let e = message(b"{\"data\": 1}\n{\"data\": 2}\n{\"dta\": 3}\n{\"data\": 4}\n");
        assert!(e.starts_with("line 3: unknown field `dta`"), "{e}");
        assert!(
            e.ends_with("nothing was written") && !e.contains("--raw"),
            "{e}"
        );
        let e = message(b"[{\"data\": 1}, 7]");
        assert!(e.starts_with("item 2: not a JSON object"), "{e}");
        let e = message(b"[{\"data\": 1}, {\"gate\": -1, \"data\": 2}]");
        assert!(e.starts_with("item 2: gate must not be negative"), "{e}");
        let e = message(b"[{\"data\": 1}, {\"data\": 2, \"data\": 3}]");
        assert!(e.starts_with("item 2: field `data` is given twice"), "{e}");
        let e = message(b"[{\"data\": 1}");
        assert!(e.starts_with("the body is not a JSON array"), "{e}");
        let e = message(b"[{\"data\": 1}] x");
        assert!(e.starts_with("the body is not a JSON array"), "{e}");
        let e = message(b"{\"data\": 1}\n{\"data\": \"\xff\"}\n");
        assert!(e.starts_with("line 2: not UTF-8"), "{e}");
        for empty in [&b""[..], b"\n \n", b"[]", b" [ ] "] {
            assert!(message(empty).contains("no items"));
        }
    }

    #[test]
    fn too_many_items_stop_the_reading() {
        let one = "{\"data\": 0}\n";
        let body = one.repeat(MAX_ENQUEUE_ITEMS);
        assert_eq!(items(body.as_bytes()).unwrap().len(), MAX_ENQUEUE_ITEMS);
        let (code, e) = items(format!("{body}{one}").as_bytes()).unwrap_err();
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.contains("more than 10000 items"), "{e}");
        let array = format!(
            "[{}]",
            vec!["{\"data\": 0}"; MAX_ENQUEUE_ITEMS + 1].join(",")
        );
        assert_eq!(
            items(array.as_bytes()).unwrap_err().0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}
