//! The JSON API's controls: a partition's actions (the same code path as
//! the command line and the dashboard's forms), an item's retry, and a
//! tenant's limits set or cleared. Each takes the admin token.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::admit::{Admin, Admitted};
use super::{answer, api_error, json_error, limits};

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

#[derive(Deserialize, Default)]
struct CheckpointBody {
    gate: Option<i64>,
}

pub(super) async fn act(
    Path((id, action)): Path<(String, String)>,
    admin: Admitted<Admin>,
    body: axum::body::Bytes,
) -> Response {
    let gate = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<CheckpointBody>(&body) {
            Ok(b) => b.gate,
            Err(_) => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "the body must be JSON: {\"gate\": N}",
                );
            }
        }
    };
    let Some(action) = Action::parse(&action, gate) else {
        let message = if action == "checkpoint" {
            "checkpoint needs a JSON body {\"gate\": N}"
        } else {
            "unknown action; use retry, pause, resume, cancel or checkpoint"
        };
        return api_error(StatusCode::BAD_REQUEST, message);
    };
    if let Err(e) = action.apply(&admin.store, &id).await {
        return json_error(e);
    }
    answer(admin.store.partition(&id).await)
}

pub(super) async fn retry_item(Path(id): Path<String>, admin: Admitted<Admin>) -> Response {
    if let Err(e) = admin.store.retry_one(&id).await {
        return json_error(e);
    }
    tracing::info!(item = %id, "operator retried an item");
    answer(admin.store.item(&id).await)
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
