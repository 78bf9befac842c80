//! The JSON API under `/api/v1`: the same reads as the pages and the same
//! controls as the command line. Actions answer 200 with the new state,
//! 401 without a valid bearer token, 403 when no admin token is
//! configured, 404 for an unknown id and 409 when the action does not apply.
//! Tenants' limits (`/limits`) are read like the rest and changed (`PUT`,
//! `DELETE`) with the admin token, as `processor limits` changes them.
//! Enqueueing (`POST /partitions/{id}/items`, see `enqueue`) also takes the
//! producer token.

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;

use super::admit::Admin;
use super::{
    Console, api_error, auth, completion, enqueue, json_error, json_errors, limits, tokens,
};
use crate::store::listing::{ItemFilter, PartitionFilter};

/// A control on one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Retry its failed items.
    Retry,
    /// Stop dispatching it.
    Pause,
    /// Dispatch it again.
    Resume,
    /// Cancel it and its available items.
    Cancel,
    /// Advance a manual partition to a gate.
    Checkpoint(i64),
}

impl Action {
    /// The action named in a URL; `gate` only for `checkpoint`.
    pub fn parse(name: &str, gate: Option<i64>) -> Option<Action> {
        Some(match name {
            "retry" => Action::Retry,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "cancel" => Action::Cancel,
            "checkpoint" => Action::Checkpoint(gate?),
            _ => return None,
        })
    }

    /// Applies the action through the store; the same code path as the CLI.
    pub async fn apply(self, store: &crate::Store, id: &str) -> crate::Result<()> {
        match self {
            Action::Retry => {
                if store.retry_partition(id).await?.items == 0 {
                    return Err(crate::Error::Conflict(format!(
                        "partition {id} has no failed items to retry"
                    )));
                }
            }
            Action::Pause => store.pause(id).await?,
            Action::Resume => store.resume(id).await?,
            Action::Cancel => {
                store.cancel(id).await?;
            }
            Action::Checkpoint(gate) => store.checkpoint(id, gate).await?,
        }
        tracing::info!(partition = %id, action = ?self, "operator action");
        Ok(())
    }
}

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/status", get(status))
        .route("/partitions", get(partitions))
        .route("/partitions/{id}", get(partition))
        // Static segments win over `{action}`, so the POST is never an action.
        .route(
            "/partitions/{id}/items",
            get(items).post(
                enqueue::enqueue.layer(DefaultBodyLimit::max(enqueue::MAX_ENQUEUE_BODY_BYTES)),
            ),
        )
        .route("/partitions/{id}/items.ndjson", get(completion::export))
        .route("/partitions/{id}/{action}", post(act))
        .route("/events", get(completion::events))
        .route("/events/retry", post(completion::retry))
        .route("/items/{id}/retry", post(retry_item))
        .route("/producer-tokens", get(tokens::list).post(tokens::create))
        .route(
            "/producer-tokens/{id}",
            axum::routing::delete(tokens::revoke),
        )
        .route("/limits", get(list_limits))
        .route("/limits/{tenant}", put(set_limit).delete(clear_limit))
        .fallback(|| async {
            api_error(
                StatusCode::NOT_FOUND,
                "no such API path; see README: JSON API",
            )
        })
        .layer(axum::middleware::map_response(json_errors))
}

fn refused((code, message): auth::Refusal) -> Response {
    api_error(code, message)
}

fn answer<T: serde::Serialize>(r: crate::Result<T>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => json_error(e),
    }
}

async fn status(State(c): State<Console>) -> Response {
    match c.store().await {
        Ok(s) => answer(s.status(None).await),
        Err(e) => json_error(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionQuery {
    status: Option<String>,
    prefix: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

async fn partitions(State(c): State<Console>, Query(q): Query<PartitionQuery>) -> Response {
    let f = PartitionFilter {
        status: q.status.filter(|s| !s.is_empty()),
        prefix: q.prefix,
        after: q.after.filter(|s| !s.is_empty()),
        limit: q.limit.unwrap_or(50),
    };
    match c.store().await {
        Ok(s) => answer(s.partitions(&f).await),
        Err(e) => json_error(e),
    }
}

async fn partition(State(c): State<Console>, Path(id): Path<String>) -> Response {
    match c.store().await {
        Ok(s) => answer(s.partition(&id).await),
        Err(e) => json_error(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemQuery {
    gate: Option<i64>,
    status: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

async fn items(
    State(c): State<Console>,
    Path(id): Path<String>,
    Query(q): Query<ItemQuery>,
) -> Response {
    let f = ItemFilter {
        gate: q.gate,
        status: q.status.filter(|s| !s.is_empty()),
        after: q.after.filter(|s| !s.is_empty()),
        limit: q.limit.unwrap_or(50),
    };
    match c.store().await {
        Ok(s) => answer(s.items(&id, &f).await),
        Err(e) => json_error(e),
    }
}

#[derive(Deserialize, Default)]
struct CheckpointBody {
    gate: Option<i64>,
}

async fn act(
    State(c): State<Console>,
    Path((id, action)): Path<(String, String)>,
    _: Admin,
    body: axum::body::Bytes,
) -> Response {
    let gate = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<CheckpointBody>(&body) {
            Ok(b) => b.gate,
            Err(_) => {
                return refused((
                    StatusCode::BAD_REQUEST,
                    "the body must be JSON: {\"gate\": N}",
                ));
            }
        }
    };
    let Some(action) = Action::parse(&action, gate) else {
        let message = if action == "checkpoint" {
            "checkpoint needs a JSON body {\"gate\": N}"
        } else {
            "unknown action; use retry, pause, resume, cancel or checkpoint"
        };
        return refused((StatusCode::BAD_REQUEST, message));
    };
    let store = match c.store().await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    if let Err(e) = action.apply(store, &id).await {
        return json_error(e);
    }
    answer(store.partition(&id).await)
}

async fn retry_item(State(c): State<Console>, Path(id): Path<String>, _: Admin) -> Response {
    let store = match c.store().await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    if let Err(e) = store.retry_one(&id).await {
        return json_error(e);
    }
    tracing::info!(item = %id, "operator retried an item");
    answer(store.item(&id).await)
}

async fn list_limits(State(c): State<Console>) -> Response {
    match c.store().await {
        Ok(s) => answer(s.limits().await),
        Err(e) => json_error(e),
    }
}

/// `PUT /limits/{tenant}` with `{"max_in_flight", "rate", "burst",
/// "weight"}`: a field absent keeps its value, `null` removes it.
async fn set_limit(
    State(c): State<Console>,
    Path(tenant): Path<String>,
    _: Admin,
    body: axum::body::Bytes,
) -> Response {
    let change = match limits::Change::from_json(&body) {
        Ok(change) => change,
        Err(e) => return json_error(e),
    };
    match c.store().await {
        Ok(s) => answer(limits::set(s, &tenant, &change).await),
        Err(e) => json_error(e),
    }
}

#[derive(serde::Serialize)]
struct Cleared {
    tenant: String,
    removed: bool,
}

/// `DELETE /limits/{tenant}`: `{"tenant", "removed"}` (false when it had none).
async fn clear_limit(State(c): State<Console>, Path(tenant): Path<String>, _: Admin) -> Response {
    let store = match c.store().await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    answer(
        limits::clear(store, &tenant)
            .await
            .map(|removed| Cleared { tenant, removed }),
    )
}
