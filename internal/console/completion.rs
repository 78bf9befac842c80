//! The other end of the pipe in the JSON API: a partition's items as JSON
//! lines (`GET /partitions/{id}/items.ndjson`, streamed page by page as
//! `processor export` writes them), and the completion events (`GET
//! /events`, and `POST /events/retry`, which needs the admin token).

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admit::Admin;
use super::{Console, api_error, json_error};
use crate::store::events::EventScope;
use crate::store::export::{Export, ExportedItem};

#[derive(Deserialize)]
pub(super) struct ExportQuery {
    status: Option<String>,
    gate: Option<i64>,
}

/// A page of items as JSON lines.
fn lines(page: &[ExportedItem]) -> Bytes {
    let mut out = String::new();
    for item in page {
        out.push_str(&crate::lines::export_line(item));
        out.push('\n');
    }
    Bytes::from(out)
}

pub(super) async fn export(
    State(c): State<Console>,
    Path(id): Path<String>,
    Query(q): Query<ExportQuery>,
) -> Response {
    let status = q.status.filter(|s| !s.is_empty());
    let started = async {
        let mut export = c.store().await?.export(&id, status.as_deref(), q.gate)?;
        // The first page is read before answering, so an unknown partition
        // is a 404 rather than an empty stream.
        let first = export.next_page().await?;
        Ok::<_, crate::Error>((first, export))
    };
    let (first, export) = match started.await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    let pages = futures_util::stream::try_unfold(
        (first, export),
        |(page, mut export): (Option<Vec<ExportedItem>>, Export)| async move {
            let page = match page {
                Some(p) => p,
                None => match export.next_page().await {
                    Ok(Some(p)) => p,
                    Ok(None) => return Ok(None),
                    Err(e) => {
                        tracing::warn!(error = %e, "export cut short");
                        return Err(e);
                    }
                },
            };
            Ok(Some((lines(&page), (None, export))))
        },
    );
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(pages),
    )
        .into_response()
}

#[derive(Deserialize)]
pub(super) struct EventQuery {
    partition: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn events(State(c): State<Console>, Query(q): Query<EventQuery>) -> Response {
    let partition = q.partition.filter(|s| !s.is_empty());
    let status = q.status.filter(|s| !s.is_empty());
    let r = async {
        let store = c.store().await?;
        store
            .events(
                partition.as_deref(),
                status.as_deref(),
                q.limit.unwrap_or(100),
            )
            .await
    };
    match r.await {
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

pub(super) async fn retry(State(c): State<Console>, _: Admin, body: Bytes) -> Response {
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
    let r = async { c.store().await?.retry_events(scope).await };
    match r.await {
        Ok(n) => {
            tracing::info!(events = n, "operator retried failed events");
            axum::Json(serde_json::json!({ "retried": n })).into_response()
        }
        Err(e) => json_error(e),
    }
}
