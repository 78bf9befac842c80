//! Schedules (recurring partitions) over the API: `GET /schedules`,
//! `PUT /schedules/{name}` and `DELETE /schedules/{name}`, as `processor
//! schedules list`, `set` and `remove`.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::admit::{Admitted, Bearer, Open};
use super::{answer, api_error, json_error};
use crate::recurring::{self, Options, Recurring};
use crate::store::ScheduleRow;

/// A schedule as the API shows it.
#[derive(Serialize)]
pub(super) struct View {
    name: String,
    cron: String,
    timezone: String,
    partition: Option<Options>,
    backfill: i32,
    next_tick: i64,
    last_partition: Option<String>,
    last_error: Option<String>,
    updated_at: i64,
}

impl From<ScheduleRow> for View {
    fn from(r: ScheduleRow) -> View {
        View {
            partition: Options::stored(&r).ok(),
            name: r.name,
            cron: r.cron,
            timezone: r.timezone,
            backfill: r.backfill,
            next_tick: r.next_tick,
            last_partition: r.last_partition,
            last_error: r.last_error,
            updated_at: r.updated_at,
        }
    }
}

/// `PUT /schedules/{name}`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Set<'a> {
    cron: String,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    backfill: Option<u32>,
    #[serde(default)]
    partition: Options,
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

/// What `PUT /schedules/{name}` takes, for its error messages.
const SHAPE: &str = "{\"cron\": \"0 2 * * *\", \"timezone\"?: \"UTC\", \"backfill\"?: N, \
     \"partition\"?: {tenant, auto_close, on_failure, priority, …}, \"items\": [{\"id\"?, \"gate\"?, \"data\"}…]}";

pub(super) async fn list(open: Admitted<Open>) -> Response {
    answer(
        open.store
            .schedules()
            .await
            .map(|rows| rows.into_iter().map(View::from).collect::<Vec<_>>()),
    )
}

pub(super) async fn set(
    Path(name): Path<String>,
    admin: Admitted<Bearer>,
    body: axum::body::Bytes,
) -> Response {
    let given: Set = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                &format!("the body must be {SHAPE}: {e}"),
            );
        }
    };
    let spec = match given.partition.spec() {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    let lines: Vec<&str> = given.items.iter().map(|i| i.get()).collect();
    let mut r = Recurring::new(name, given.cron, lines.join("\n"));
    r.timezone = given.timezone.unwrap_or(r.timezone);
    r.backfill = given.backfill.unwrap_or(r.backfill);
    r.spec = spec;
    answer(recurring::set(&admin.store, &r).await.map(View::from))
}

pub(super) async fn remove(Path(name): Path<String>, admin: Admitted<Bearer>) -> Response {
    match admin.store.remove_schedule(&name).await {
        Ok(true) => {
            tracing::info!(schedule = %name, "schedule removed over the API");
            axum::Json(serde_json::json!({"name": name, "removed": true})).into_response()
        }
        Ok(false) => api_error(StatusCode::NOT_FOUND, "no schedule has this name"),
        Err(e) => json_error(e),
    }
}
