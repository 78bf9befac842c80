//! The other end of the pipe in the JSON API: a partition's items as JSON
//! lines (`GET /partitions/{id}/items.ndjson`, streamed line by line as
//! `processor export` writes them, within a budget of bytes), and the completion events (`GET
//! /events`, and `POST /events/retry`, which needs the admin token).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::admit::{Admin, Admitted, Open};
use super::{Console, api_error, json_error};
use crate::store::events::EventScope;
use crate::store::export::{Export, ExportedItem, Planned};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportQuery {
    status: Option<String>,
    gate: Option<i64>,
}

/// Bytes of exported items a console holds at once, over all its exports:
/// 64 MiB. A page takes its share before it is read, and a slow reader's
/// page keeps it until its last line is written to the socket; the next
/// page of an export waits for room.
pub const EXPORT_BUDGET_BYTES: usize = 64 << 20;

/// The export budget counts in KiB (a semaphore counts in `u32`).
const UNIT: usize = 1 << 10;

/// The export budget, as a semaphore of [`UNIT`]s.
pub(super) fn export_budget() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(EXPORT_BUDGET_BYTES / UNIT))
}

/// A page's share of the budget: its data twice (the items read and the
/// lines made of them) and a little per item, at most the whole budget.
fn units(plan: &Planned) -> u32 {
    let bytes = 2 * plan.bytes + 512 * plan.items;
    let units = bytes.div_ceil(UNIT).clamp(1, EXPORT_BUDGET_BYTES / UNIT);
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// Small lines are sent together up to this size; a larger line alone.
const FRAME_BYTES: usize = 64 << 10;

/// Lines of items, holding their page's share of the budget until they
/// are written.
struct Lines {
    text: String,
    _room: Arc<OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Lines {
    fn as_ref(&self) -> &[u8] {
        self.text.as_bytes()
    }
}

/// An export being sent: the page in hand and its share of the budget.
struct Sending {
    export: Export,
    budget: Arc<Semaphore>,
    /// The first page, planned before answering.
    first: Option<Planned>,
    page: std::vec::IntoIter<ExportedItem>,
    room: Option<Arc<OwnedSemaphorePermit>>,
    failed: bool,
}

impl Sending {
    /// The next lines (up to [`FRAME_BYTES`], or one larger line: a page
    /// is never one string); reads the next page when this one is sent,
    /// once there is room.
    async fn next(mut self) -> Option<(crate::Result<Bytes>, Sending)> {
        loop {
            if self.failed {
                return None;
            }
            let mut text = String::new();
            // Small lines go out together, up to a frame of 64 KiB.
            while text.len() < FRAME_BYTES {
                let Some(item) = self.page.next() else { break };
                text.push_str(&crate::lines::export_line(&item));
                text.push('\n');
            }
            if !text.is_empty() {
                let room = self.room.clone().expect("a page in hand has its room");
                let lines = Lines { text, _room: room };
                return Some((Ok(Bytes::from_owner(lines)), self));
            }
            self.room = None;
            match self.read().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "export cut short");
                    self.failed = true;
                    return Some((Err(e), self));
                }
            }
        }
    }

    /// Reads the next page into hand; false after the last.
    async fn read(&mut self) -> crate::Result<bool> {
        let plan = match self.first.take() {
            Some(p) => p,
            None => match self.export.plan().await? {
                Some(p) => p,
                None => return Ok(false),
            },
        };
        let room = self
            .budget
            .clone()
            .acquire_many_owned(units(&plan))
            .await
            .expect("the export budget is never closed");
        self.page = self.export.fetch(plan).await?.into_iter();
        self.room = Some(Arc::new(room));
        Ok(true)
    }
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
    let sending = Sending {
        export,
        budget: c.exports.clone(),
        first,
        page: Vec::new().into_iter(),
        room: None,
        failed: false,
    };
    let lines = futures_util::stream::unfold(sending, Sending::next);
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
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
