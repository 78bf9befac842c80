//! The other end of the pipe in the JSON API: a partition's items as JSON
//! lines (`GET /partitions/{id}/items.ndjson`, streamed line by line as
//! `processor export` writes them, within a budget of bytes: see
//! `stream`), and the completion events (`GET
//! /events`, and `POST /events/retry`, which needs the admin token).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admit::{Admin, Admitted, Open};
use super::{Console, api_error, json_error};
use crate::store::events::EventScope;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    status: Option<String>,
    gate: Option<i64>,
}

pub(super) async fn export(
    State(c): State<Console>,
    Path(id): Path<String>,
    Query(q): Query<ExportQuery>,
    open: Admitted<Open>,
) -> Response {
    let status = q.status.filter(|s| !s.is_empty());
    let started = async {
        let mut export = open.store.export(&id, status.as_deref(), q.gate)?;
        // The first page is planned before answering, so an unknown
        // partition is a 404 rather than an empty stream.
        let first = export.plan().await?;
        Ok::<_, crate::Error>((first, export))
    };
    let (first, export) = match started.await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    let lines = super::stream::lines(export, first, c.exports.clone(), crate::lines::export_line);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], lines).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventQuery {
    partition: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn events(Query(q): Query<EventQuery>, open: Admitted<Open>) -> Response {
    let partition = q.partition.filter(|s| !s.is_empty());
    let status = q.status.filter(|s| !s.is_empty());
    let r = open
        .store
        .events(
            partition.as_deref(),
            status.as_deref(),
            q.limit.unwrap_or(100),
        )
        .await;
    match r {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => json_error(e),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    partition: Option<String>,
    id: Option<i64>,
}

pub(super) async fn retry(admin: Admitted<Admin>, body: Bytes) -> Response {
    let b: RetryBody = if body.is_empty() {
        RetryBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(_) => {
                let message = "the body must be JSON: {} (all), {\"partition\": ID} or {\"id\": N}";
                return api_error(StatusCode::BAD_REQUEST, message);
            }
        }
    };
    let scope = match (&b.partition, b.id) {
        (Some(p), _) => EventScope::Partition(p),
        (None, Some(id)) => EventScope::Event(id),
        (None, None) => EventScope::All,
    };
    match admin.store.retry_events(scope).await {
        Ok(n) => {
            tracing::info!(events = n, "operator retried failed events");
            axum::Json(serde_json::json!({ "retried": n })).into_response()
        }
        Err(e) => json_error(e),
    }
}
