//! The JSON API's controls: a partition's actions (the same code path as
//! the command line and the dashboard's forms), an item's retry, and a
//! tenant's limits set or cleared. Each takes the admin token.

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::admit::{Admin, Admitted};
use super::{answer, api_error, json_error, limits};

/// A control on one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
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
    /// Set its priority.
    Priority(i32),
}

impl Action {
    /// The action named in a URL; `gate` only for `checkpoint`,
    /// `priority` only for `priority`.
    pub(super) fn parse(name: &str, gate: Option<i64>, priority: Option<i32>) -> Option<Action> {
        Some(match name {
            "retry" => Action::Retry,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "cancel" => Action::Cancel,
            "checkpoint" => Action::Checkpoint(gate?),
            "priority" => Action::Priority(priority?),
            _ => return None,
        })
    }

    /// Its name in a URL.
    pub(super) fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
            Action::Checkpoint(_) => "checkpoint",
            Action::Priority(_) => "priority",
        }
    }

    /// Applies the action through the store; the same code path as the CLI.
    pub(super) async fn apply(self, store: &crate::Store, id: &str) -> crate::Result<()> {
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
            Action::Priority(p) => store.set_priority(id, p).await?,
        }
        tracing::info!(partition = %id, action = ?self, "operator action");
        Ok(())
    }
}

/// The body of an action: `{"gate": N}` for `checkpoint`,
/// `{"priority": N}` for `priority`.
#[derive(Deserialize, Default)]
struct ActionBody {
    gate: Option<i64>,
    priority: Option<i32>,
}

pub(super) async fn act(
    Path((id, action)): Path<(String, String)>,
    admin: Admitted<Admin>,
    body: axum::body::Bytes,
) -> Response {
    let b = if body.is_empty() {
        ActionBody::default()
    } else {
        match serde_json::from_slice::<ActionBody>(&body) {
            Ok(b) => b,
            Err(_) => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "the body must be JSON: {\"gate\": N} or {\"priority\": N}",
                );
            }
        }
    };
    let Some(action) = Action::parse(&action, b.gate, b.priority) else {
        let message = match action.as_str() {
            "checkpoint" => "checkpoint needs a JSON body {\"gate\": N}",
            "priority" => "priority needs a JSON body {\"priority\": N}, N from -1000 to 1000",
            _ => "unknown action; use retry, pause, resume, cancel, checkpoint or priority",
        };
        return api_error(StatusCode::BAD_REQUEST, message);
    };
    if let Err(e) = action.apply(&admin.store, &id).await {
        return json_error(e);
    }
    answer(admin.store.partition(&id).await)
}

/// Which partition's item an item route means: ids are unique only
/// within a partition, so an id alone is enough only while one partition
/// has an item by it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ItemAt {
    pub(super) partition: Option<String>,
}

pub(super) async fn retry_item(
    Path(id): Path<String>,
    Query(at): Query<ItemAt>,
    admin: Admitted<Admin>,
) -> Response {
    let partition = at.partition.as_deref();
    if let Err(e) = admin.store.retry_one(partition, &id).await {
        return json_error(e);
    }
    tracing::info!(item = %id, partition = ?partition, "operator retried an item");
    answer(admin.store.item(partition, &id).await)
}

/// `PUT /limits/{tenant}` with `{"max_in_flight", "rate", "burst",
/// "weight"}`: a field absent keeps its value, `null` removes it.
pub(super) async fn set_limit(
    Path(tenant): Path<String>,
    admin: Admitted<Admin>,
    body: axum::body::Bytes,
) -> Response {
    match limits::Change::from_json(&body) {
        Ok(change) => answer(limits::set(&admin.store, &tenant, &change).await),
        Err(e) => json_error(e),
    }
}

#[derive(serde::Serialize)]
struct Cleared {
    tenant: String,
    removed: bool,
}

/// `DELETE /limits/{tenant}`: `{"tenant", "removed"}` (false when it had none).
pub(super) async fn clear_limit(Path(tenant): Path<String>, admin: Admitted<Admin>) -> Response {
    answer(
        limits::clear(&admin.store, &tenant)
            .await
            .map(|removed| Cleared { tenant, removed }),
    )
}
