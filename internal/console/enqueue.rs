//! `POST /api/v1/partitions/{id}/items`: enqueue over HTTP, for producers
//! that cannot reach the database. The body is a JSON array of items or
//! JSON lines, each item `{"id"?: string, "gate"?: int, "data": any}` as
//! `processor enqueue` reads them (the same parser, [`crate::lines::parse`]),
//! written in one transaction: a bad item rejects the whole request and
//! nothing is written. The producer token or the admin token allows it.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ClientAddr, Console, api_error, auth, json_error};
use crate::store::{NewItem, OnFailure, PartitionSpec};

/// The largest body `POST /api/v1/partitions/{id}/items` reads: 16 MiB.
/// A larger one answers 413; split the items into several requests (each
/// is its own transaction).
pub const MAX_ENQUEUE_BODY_BYTES: usize = 16 << 20;

/// Settings of a partition the request creates, as the flags of
/// `processor enqueue`; ignored when the partition exists.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnqueueQuery {
    /// Close when nothing is left (default true; `--no-auto-close`).
    auto_close: Option<bool>,
    /// Never advance the gate automatically (default false).
    manual_checkpoint: Option<bool>,
    /// `block` (default) or `continue`.
    on_failure: Option<String>,
    /// Write a `partition.gate` event each time the gate moves (default false).
    gate_events: Option<bool>,
    /// The partition's tenant.
    tenant: Option<String>,
    /// Its share of dispatch.
    weight: Option<u32>,
    /// Its own cap on items in flight.
    max_in_flight: Option<u32>,
}

impl EnqueueQuery {
    fn spec(&self) -> Result<PartitionSpec, &'static str> {
        let mut spec = PartitionSpec::default();
        if let Some(a) = self.auto_close {
            spec.auto_close = a;
        }
        if let Some(m) = self.manual_checkpoint {
            spec.manual_checkpoint = m;
        }
        if let Some(g) = self.gate_events {
            spec.gate_events = g;
        }
        if self.weight.is_some_and(|w| !(1..=1000).contains(&w)) || self.max_in_flight == Some(0) {
            return Err("weight runs from 1 to 1000, and max_in_flight must be at least 1");
        }
        spec.tenant = self.tenant.clone();
        spec.weight = self.weight;
        spec.max_in_flight = self.max_in_flight;
        spec.on_failure = match self.on_failure.as_deref() {
            None | Some("block") => OnFailure::Block,
            Some("continue") => OnFailure::Continue,
            Some(_) => return Err("on_failure must be block or continue"),
        };
        Ok(spec)
    }
}

/// What an enqueue answers.
#[derive(serde::Serialize)]
struct Answer<'a> {
    partition: &'a str,
    items: usize,
    created: bool,
    reopened: bool,
    /// Every item's id in the body's order, generated ones included.
    ids: Vec<String>,
}

pub(super) async fn enqueue(
    State(c): State<Console>,
    Path(id): Path<String>,
    client: Option<Extension<ClientAddr>>,
    query: Result<Query<EnqueueQuery>, QueryRejection>,
    request: Request,
) -> Response {
    // The token first: nothing of the body is read for a refused request.
    let check = || {
        auth::check_producer(
            c.token.as_ref(),
            c.producer_token.as_ref(),
            request.headers(),
        )
    };
    if let Err(g) = c.guarded(client.as_deref(), "enqueue", check) {
        return g.json();
    }
    let spec = match query.as_ref().map(|q| q.spec()) {
        Ok(Ok(spec)) => spec,
        Ok(Err(message)) => return api_error(StatusCode::BAD_REQUEST, message),
        Err(rejection) => return api_error(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    // Bounded by the route's `DefaultBodyLimit`.
    let body = match axum::body::Bytes::from_request(request, &c).await {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let message = format!(
                "the body is over the limit of {MAX_ENQUEUE_BODY_BYTES} bytes (16 MiB); \
                 split the items into several requests"
            );
            return api_error(StatusCode::PAYLOAD_TOO_LARGE, &message);
        }
        Err(e) => return api_error(e.status(), &e.body_text()),
    };
    let items = match parse(&body) {
        Ok(items) => with_ids(items),
        Err(message) => return api_error(StatusCode::BAD_REQUEST, &message),
    };
    let ids: Vec<String> = items.iter().filter_map(|i| i.id.clone()).collect();
    let store = match c.store().await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    match store.enqueue(&id, &spec, items).await {
        Ok(r) => {
            tracing::info!(
                partition = %id,
                items = r.items,
                created = r.created,
                reopened = r.reopened,
                "items enqueued over the API"
            );
            let answer = Answer {
                partition: &id,
                items: r.items,
                created: r.created,
                reopened: r.reopened,
                ids,
            };
            axum::Json(answer).into_response()
        }
        Err(e) => json_error(e),
    }
}

/// Gives every item without an id a new UUID, so that the answer can
/// name it.
fn with_ids(items: Vec<NewItem>) -> Vec<NewItem> {
    items
        .into_iter()
        .map(|item| match item.id {
            Some(_) => item,
            None => item.with_id(uuid::Uuid::new_v4().to_string()),
        })
        .collect()
}

/// The items of a body: a JSON array when its first non-whitespace byte
/// is `[`, else JSON lines (blank lines skipped). The first bad item fails
/// the whole body, naming it ("item N" of an array, "line N" of lines).
fn parse(body: &[u8]) -> Result<Vec<NewItem>, String> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!("line {line}: not UTF-8; nothing was written")
    })?;
    let parse_one =
        |item: &str| crate::lines::parse(item, false).map_err(|e| e.replace(" (or use --raw)", ""));
    let items = if text.trim_start().starts_with('[') {
        let elements: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
            format!("the body is not a JSON array of items: {e}; nothing was written")
        })?;
        elements
            .iter()
            .enumerate()
            .map(|(n, raw)| {
                parse_one(raw.get())
                    .map_err(|e| format!("item {}: {e}; nothing was written", n + 1))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                parse_one(line).map_err(|e| format!("line {}: {e}; nothing was written", n + 1))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    if items.is_empty() {
        return Err(
            "the body holds no items; send a JSON array of items or JSON lines, \
             each {\"id\"?: string, \"gate\"?: int, \"data\": any}"
                .into(),
        );
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(items: &[NewItem]) -> Vec<(Option<&str>, Option<i64>, String)> {
        items
            .iter()
            .map(|i| {
                let data = String::from_utf8(i.data.clone()).unwrap();
                (i.id.as_deref(), i.gate, data)
            })
            .collect()
    }

    #[test]
    fn arrays_and_lines_read_alike() {
        let lines = "{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}\r\n\n  \n{\"data\": [1]}";
        let array = " \n[{\"id\": \"a\", \"gate\": 2, \"data\": {\"x\": 1}}, {\"data\": [1]}]\n";
        let want = vec![
            (Some("a"), Some(2), r#"{"x":1}"#.to_string()),
            (None, None, "[1]".to_string()),
        ];
        assert_eq!(summary(&parse(lines.as_bytes()).unwrap()), want);
        assert_eq!(summary(&parse(array.as_bytes()).unwrap()), want);
        // One line holding an array of one item is an array.
        assert_eq!(parse(b"[{\"data\": null}]").unwrap().len(), 1);
    }

    #[test]
    fn bad_items_name_their_place() {
        let e = parse(b"{\"data\": 1}\n{\"data\": 2}\n{\"dta\": 3}\n{\"data\": 4}\n").unwrap_err();
        assert!(e.starts_with("line 3: unknown field `dta`"), "{e}");
        assert!(
            e.ends_with("nothing was written") && !e.contains("--raw"),
            "{e}"
        );
        let e = parse(b"[{\"data\": 1}, 7]").unwrap_err();
        assert!(e.starts_with("item 2: "), "{e}");
        let e = parse(b"[{\"data\": 1}, {\"gate\": -1, \"data\": 2}]").unwrap_err();
        assert!(e.starts_with("item 2: gate must not be negative"), "{e}");
        let e = parse(b"[{\"data\": 1}").unwrap_err();
        assert!(e.starts_with("the body is not a JSON array"), "{e}");
        let e = parse(b"{\"data\": 1}\n{\"data\": \"\xff\"}\n").unwrap_err();
        assert!(e.starts_with("line 2: not UTF-8"), "{e}");
        for empty in [&b""[..], b"\n \n", b"[]", b" [ ] "] {
            assert!(parse(empty).unwrap_err().contains("no items"));
        }
    }

    #[test]
    fn generated_ids_are_given_and_kept() {
        let items = with_ids(parse(b"{\"id\": \"mine\", \"data\": 1}\n{\"data\": 2}").unwrap());
        assert_eq!(items[0].id.as_deref(), Some("mine"));
        let generated = items[1].id.as_deref().unwrap();
        assert!(uuid::Uuid::parse_str(generated).is_ok(), "{generated}");
    }

    #[test]
    fn query_spec() {
        let q = |a, m, f: Option<&str>| EnqueueQuery {
            auto_close: a,
            manual_checkpoint: m,
            on_failure: f.map(str::to_string),
            gate_events: m,
            tenant: None,
            weight: None,
            max_in_flight: None,
        };
        let s = q(None, None, None).spec().unwrap();
        assert!(s.auto_close && !s.manual_checkpoint && s.on_failure == OnFailure::Block);
        assert!(!s.gate_events);
        let s = q(Some(false), Some(true), Some("continue")).spec().unwrap();
        assert!(!s.auto_close && s.manual_checkpoint && s.on_failure == OnFailure::Continue);
        assert!(s.gate_events);
        assert!(q(None, None, Some("ignore")).spec().is_err());
    }
}
