//! `POST /api/v1/partitions/{id}/items`: enqueue over HTTP, for producers
//! that cannot reach the database. The body is a JSON array of items or
//! JSON lines, each item `{"id"?: string, "gate"?: int, "data": any}` as
//! `processor enqueue` reads them (the same parser, [`crate::lines::parse`]),
//! written in one transaction: a bad item rejects the whole request and
//! nothing is written. The query parameters `not_before` and `delay` give
//! every item that has neither its time, and the `traceparent` header the
//! producer's trace to every item without its own. The admin token allows
//! any partition; a producer token of `feed_producer_tokens` only what its
//! scope does, and the legacy `--producer-token` only partitions of no
//! tenant (see `tokens`); a producer token revoked while its request is
//! under way writes nothing (401, checked in the write transaction).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admit::Admitted;
use super::tokens::Producing;
use super::{Console, api_error, enqueue_body, json_error};
use crate::ids::Tenant;
use crate::store::{NewItem, OnFailure, PartitionSpec, Schedule};

pub use super::enqueue_body::{MAX_ENQUEUE_BODY_BYTES, MAX_ENQUEUE_ITEMS};

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
    /// Served before lower ones of its tenant (-1000 to 1000, default 0).
    priority: Option<i32>,
    /// No item of the request runs before this time (epoch milliseconds
    /// or RFC 3339), unless it says otherwise.
    not_before: Option<String>,
    /// No item of the request runs before this long after it is written,
    /// by the database's clock, unless it says otherwise.
    delay: Option<String>,
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
        spec.tenant = self.tenant.as_deref().map(Tenant::from);
        spec.weight = self.weight;
        spec.max_in_flight = self.max_in_flight;
        spec.priority = self.priority.unwrap_or(0);
        spec.on_failure = match self.on_failure.as_deref() {
            None | Some("block") => OnFailure::Block,
            Some("continue") => OnFailure::Continue,
            Some(_) => return Err("on_failure must be block or continue"),
        };
        Ok(spec)
    }

    /// The schedule of the request's items that give none of their own.
    fn schedule(&self) -> Result<Option<Schedule>, String> {
        crate::schedule::default_of(self.not_before.as_deref(), self.delay.as_deref())
            .map_err(|e| format!("in the query: {e}"))
    }
}

/// What an enqueue answers.
#[derive(serde::Serialize)]
struct Answer<'a> {
    partition: &'a str,
    items: usize,
    created: bool,
    reopened: bool,
    /// The partition is `failed`: the items wait until it is retried.
    failed: bool,
    /// Why the items wait, when they do.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// Every item's id in the body's order, generated ones included.
    ids: Vec<String>,
}

pub(super) async fn enqueue(
    State(console): State<Console>,
    Path(id): Path<String>,
    Admitted {
        store,
        who: Producing(scope),
    }: Admitted<Producing>,
    query: Result<Query<EnqueueQuery>, QueryRejection>,
    request: Request,
) -> Response {
    let (spec, schedule) = match query.as_ref().map(|q| (q.spec(), q.schedule())) {
        Ok((Ok(spec), Ok(schedule))) => (spec, schedule),
        Ok((Err(message), _)) => return api_error(StatusCode::BAD_REQUEST, message),
        Ok((_, Err(message))) => return api_error(StatusCode::BAD_REQUEST, &message),
        Err(rejection) => return api_error(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    // What the token may not do is refused before the body is read.
    if let Some(scope) = &scope
        && let Err(e) = scope.admit(&id, &mut spec.clone(), &[])
    {
        return json_error(e);
    }
    let trace = match request.headers().get("traceparent").map(|v| v.to_str()) {
        None => None,
        Some(Ok(text)) => match crate::validate::traceparent(text) {
            Ok(t) => Some(t),
            Err(message) => return api_error(StatusCode::BAD_REQUEST, &message),
        },
        Some(Err(_)) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "the traceparent header is not text; give a W3C traceparent",
            );
        }
    };
    let (parts, body) = request.into_parts();
    // Held until the answer: the body and the items written from it.
    let holder = scope.as_ref().map_or("", |s| s.id.as_str());
    let (body, _budget) =
        match enqueue_body::read(&console.enqueues, &parts.headers, body, holder).await {
            Ok(b) => b,
            Err((code, message)) => return api_error(code, &message),
        };
    let prefix = scope
        .as_ref()
        .and_then(|s| s.prefix.as_deref())
        .unwrap_or("");
    let mut items = match enqueue_body::parse(&body) {
        Ok(items) => with_ids(items, prefix),
        Err((code, message)) => return api_error(code, &message),
    };
    for item in &mut items {
        if let Some(schedule) = schedule {
            item.schedule.get_or_insert(schedule);
        }
        if let Some(trace) = &trace {
            item.traceparent.get_or_insert_with(|| trace.clone());
        }
    }
    let ids: Vec<String> = items.iter().filter_map(|i| i.id.clone()).collect();
    match store.enqueue_as(&id, &spec, items, scope.as_ref()).await {
        Ok(r) => {
            console.enqueued();
            tracing::info!(
                partition = %id,
                token = scope.as_ref().map_or("", |s| s.id.as_str()),
                items = r.items,
                created = r.created,
                reopened = r.reopened,
                failed = r.failed,
                "items enqueued over the API"
            );
            let message = r.failed.then(|| {
                format!(
                    "partition {id} is failed: these items run once its failed items are \
                     retried (POST /api/v1/partitions/{}/retry or processor retry)",
                    percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC)
                )
            });
            let answer = Answer {
                partition: &id,
                items: r.items,
                created: r.created,
                reopened: r.reopened,
                failed: r.failed,
                message,
                ids,
            };
            axum::Json(answer).into_response()
        }
        Err(e) => json_error(e),
    }
}

/// Gives every item without an id a new UUID after `prefix` (a scoped
/// token's), so that the answer can name it; marked generated, it is not
/// held to other tenants' prefixes as a given id is.
fn with_ids(items: Vec<NewItem>, prefix: &str) -> Vec<NewItem> {
    items
        .into_iter()
        .map(|item| match item.id {
            Some(_) => item,
            None => item.with_generated_id(format!("{prefix}{}", uuid::Uuid::new_v4())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_given_and_kept() {
        let body = bytes::Bytes::from_static(b"{\"id\": \"mine\", \"data\": 1}\n{\"data\": 2}");
        let items = with_ids(enqueue_body::parse(&body).unwrap(), "");
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
            priority: None,
            not_before: None,
            delay: None,
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
