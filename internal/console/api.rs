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
use axum::routing::{MethodRouter, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;

use super::admit::Admin;
use super::endpoints::{Access, Endpoint, fields, no_query};
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

/// Every route with what the reference says of it; `routes` serves
/// exactly these.
pub(super) fn table() -> Vec<(Endpoint, MethodRouter<Console>)> {
    use Access::{Admin, Open, Producer};
    let e = |method, path, query, body, access, answer| Endpoint {
        method,
        path,
        query,
        body,
        access,
        answer,
    };
    vec![
        (
            e(
                "GET",
                "/status",
                no_query,
                "",
                Open,
                "the same document as `processor status --json`",
            ),
            get(status),
        ),
        (
            e(
                "GET",
                "/partitions",
                fields::<PartitionQuery>,
                "",
                Open,
                "`{\"data\": [partition…], \"next\": id or null}`, in id order",
            ),
            get(partitions),
        ),
        (
            e(
                "GET",
                "/partitions/{id}",
                no_query,
                "",
                Open,
                "one partition with `items_by_status` and `items_by_gate`",
            ),
            get(partition),
        ),
        (
            e(
                "GET",
                "/partitions/{id}/items",
                fields::<ItemQuery>,
                "",
                Open,
                "`{\"data\": [item…], \"next\": id or null}`",
            ),
            get(items),
        ),
        (
            e(
                "POST",
                "/partitions/{id}/items",
                fields::<enqueue::EnqueueQuery>,
                "a JSON array of items, or JSON lines",
                Producer,
                "enqueues the items in one transaction: `{partition, items, created, reopened, failed, ids}`",
            ),
            post(enqueue::enqueue.layer(DefaultBodyLimit::max(enqueue::MAX_ENQUEUE_BODY_BYTES))),
        ),
        (
            e(
                "GET",
                "/partitions/{id}/items.ndjson",
                fields::<completion::ExportQuery>,
                "",
                Open,
                "the partition's items as JSON lines in write order, streamed: the lines of `processor export` (`application/x-ndjson`)",
            ),
            get(completion::export),
        ),
        (
            e(
                "POST",
                "/partitions/{id}/{action}",
                no_query,
                "`{\"gate\": N}` for `checkpoint`, else none",
                Admin,
                "`action` is `retry` (its failed items), `pause`, `resume`, `cancel` or `checkpoint` (a manual partition), as the commands; answers the partition",
            ),
            post(act),
        ),
        (
            e(
                "POST",
                "/items/{id}/retry",
                no_query,
                "",
                Admin,
                "retries one failed item; answers the item",
            ),
            post(retry_item),
        ),
        (
            e(
                "GET",
                "/events",
                fields::<completion::EventQuery>,
                "",
                Open,
                "completion events, oldest first: `[{id, partition_id, kind, gate, counts, status, attempts, last_error, created_at}…]`",
            ),
            get(completion::events),
        ),
        (
            e(
                "POST",
                "/events/retry",
                no_query,
                "`{}`, `{\"partition\": ID}` or `{\"id\": N}`",
                Admin,
                "failed events back to pending: `{\"retried\": n}`",
            ),
            post(completion::retry),
        ),
        (
            e(
                "GET",
                "/producer-tokens",
                no_query,
                "",
                Admin,
                "the producer tokens' scopes, oldest first: `[{id, tenant, prefix, max_weight, max_in_flight, created_at}…]`",
            ),
            get(tokens::list),
        ),
        (
            e(
                "POST",
                "/producer-tokens",
                no_query,
                "`{\"tenant\": T, \"prefix\"?: P, \"max_weight\"?: N, \"max_in_flight\"?: N}`",
                Admin,
                "creates a producer token: its scope and, this once, `token`",
            ),
            post(tokens::create),
        ),
        (
            e(
                "DELETE",
                "/producer-tokens/{id}",
                no_query,
                "",
                Admin,
                "revokes it: `{\"id\": …, \"revoked\": true}`; 404 when there is none",
            ),
            axum::routing::delete(tokens::revoke),
        ),
        (
            e(
                "GET",
                "/limits",
                no_query,
                "",
                Open,
                "every tenant's limits, by tenant: `[{tenant, max_in_flight, rate, burst, weight}…]` (`rate` in items per second; `null` = no limit)",
            ),
            get(list_limits),
        ),
        (
            e(
                "PUT",
                "/limits/{tenant}",
                no_query,
                "`{\"max_in_flight\": N, \"rate\": \"100/s\", \"burst\": N, \"weight\": N}`",
                Admin,
                "sets a tenant's limits, as `processor limits set`: a field left out keeps its value, `null` removes it, `max_in_flight: 0` is no cap, `rate` is `\"500/s\"`, `\"30/m\"`, `\"1000/h\"` or a number of items per second, `weight` runs from 1 to 1000; answers the tenant's limits",
            ),
            put(set_limit),
        ),
        (
            e(
                "DELETE",
                "/limits/{tenant}",
                no_query,
                "",
                Admin,
                "removes a tenant's limits: `{\"tenant\": …, \"removed\": true}` (`false` when it had none)",
            ),
            axum::routing::delete(clear_limit),
        ),
    ]
}

pub(super) fn routes() -> Router<Console> {
    // Static segments win over `{action}`, so the item POST is never an action.
    table()
        .into_iter()
        .fold(Router::new(), |r, (e, route)| r.route(e.path, route))
        .fallback(|| async {
            api_error(
                StatusCode::NOT_FOUND,
                "no such API path; see the book's reference: HTTP API",
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
