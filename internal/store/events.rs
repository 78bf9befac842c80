//! Completion events: the `feed_events` outbox that Feed writes in the
//! transaction that closes, fails or cancels a partition (`store::outbox`),
//! read here for listings and `wait`, and moved
//! through delivery (`pending` → `delivered`, or `failed` once delivery
//! gives up) by the events worker.

use std::time::Duration;

use sea_orm::{FromQueryResult, Statement, Value};
use serde::Serialize;

use super::driver::{Sql, sql};
use super::{Store, get};
use crate::{Error, Result, validate};

/// A partition's items by status, as an event records them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Counts {
    /// Items still `available`.
    pub available: i64,
    /// Items `complete`.
    pub complete: i64,
    /// Items `failed`.
    pub failed: i64,
    /// Items `cancelled`.
    pub cancelled: i64,
}

/// One row of `feed_events`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Event {
    /// Increasing id; the webhook's idempotency key.
    pub id: i64,
    /// The partition it is about.
    pub partition_id: String,
    /// `partition.complete`, `partition.failed`, `partition.cancelled` or
    /// `partition.gate`.
    pub kind: String,
    /// The partition's gate at the change.
    pub gate: i64,
    /// Its items by status at the change.
    pub counts: Counts,
    /// Delivery state: `pending`, `delivered` or `failed`.
    pub status: String,
    /// Delivery attempts so far.
    pub attempts: i32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When the change happened (epoch ms, database clock).
    pub created_at: i64,
}

#[derive(FromQueryResult)]
struct EventRow {
    id: i64,
    partition_id: String,
    kind: String,
    gate: i64,
    items_available: i64,
    items_complete: i64,
    items_failed: i64,
    items_cancelled: i64,
    status: String,
    attempts: i32,
    last_error: Option<String>,
    created_at: i64,
}

impl From<EventRow> for Event {
    fn from(r: EventRow) -> Self {
        Event {
            id: r.id,
            partition_id: r.partition_id,
            kind: r.kind,
            gate: r.gate,
            counts: Counts {
                available: r.items_available,
                complete: r.items_complete,
                failed: r.items_failed,
                cancelled: r.items_cancelled,
            },
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error,
            created_at: r.created_at,
        }
    }
}

/// Columns read into an [`Event`].
const COLUMNS: &str = "e.id, e.partition_id, e.kind, e.gate, e.items_available, e.items_complete, \
     e.items_failed, e.items_cancelled, e.status, e.attempts, e.last_error, e.created_at";

/// Delivery states an event can be listed by.
const STATES: [&str; 3] = ["pending", "delivered", "failed"];

/// Which events [`Store::retry_events`] puts back to `pending`.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum EventScope<'a> {
    /// Every failed event.
    All,
    /// The failed events of one partition.
    Partition(&'a str),
    /// One event (if it failed).
    Event(i64),
}

impl Store {
    /// Events oldest first, of one partition or all, in one delivery state
    /// or any; at most `limit`.
    pub async fn events(
        &self,
        partition: Option<&str>,
        status: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let mut sql = Sql::new(self.driver);
        sql.push(&format!("SELECT {COLUMNS} FROM feed_events e WHERE 1 = 1"));
        if let Some(p) = partition {
            validate::filter("partition id", p)?;
            sql.push(" AND e.partition_id = ").bind(p);
        }
        if let Some(s) = status {
            if !STATES.contains(&s) {
                return Err(Error::Invalid(format!(
                    "unknown event status {s:?}; use pending, delivered or failed"
                )));
            }
            sql.push(" AND e.status = ").bind(s);
        }
        sql.push(" ORDER BY e.id LIMIT ")
            .bind(limit.min(10_000) as i64);
        self.event_rows(sql.statement()).await
    }

    async fn event_rows(&self, st: Statement) -> Result<Vec<Event>> {
        self.fetch(st)
            .await?
            .iter()
            .map(|r| Ok(EventRow::from_query_result(r, "")?.into()))
            .collect()
    }

    /// Events `pending` and `failed` (delivered ones are not counted), of
    /// one partition or all, for `status`, the console and metrics.
    pub async fn event_backlog(&self, partition: Option<&str>) -> Result<(i64, i64)> {
        let mut sql = Sql::new(self.driver);
        for (k, status) in ["pending", "failed"].into_iter().enumerate() {
            sql.push(if k == 0 { "SELECT " } else { ", " })
                .push(&format!(
                    "(SELECT COUNT(*) FROM feed_events WHERE status = '{status}'"
                ));
            if let Some(p) = partition {
                sql.push(" AND partition_id = ").bind(p);
            }
            sql.push(&format!(") AS {status}"));
        }
        let rows = self.fetch(sql.statement()).await?;
        let r = rows
            .first()
            .ok_or_else(|| Error::NotFound("counts".into()))?;
        Ok((get(r, "pending")?, get(r, "failed")?))
    }

    /// Whether a processor sends events now: one holds the `events` lease,
    /// which only a processor started with `--events-url` takes. Without
    /// one, pending events wait (kept, not lost).
    pub async fn events_sender(&self) -> Result<bool> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT COUNT(*) AS n FROM feed_maintenance WHERE name = 'events' \
                 AND holder IS NOT NULL AND expires_at > {now}"
            ))
            .await?;
        let n: i64 = rows.first().map(|r| get(r, "n")).transpose()?.unwrap_or(0);
        Ok(n > 0)
    }

    /// Pending events that may be sent now, oldest first, at most `limit`:
    /// one whose partition has an earlier event still pending waits for it,
    /// so a partition's events arrive in the order they happened.
    pub(crate) async fn deliverable(&self, limit: usize) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM feed_events e WHERE e.status = 'pending' \
             AND (e.not_before IS NULL OR e.not_before <= {{now}}) \
             AND NOT EXISTS (SELECT 1 FROM feed_events o WHERE o.partition_id = e.partition_id \
             AND o.id < e.id AND o.status = 'pending') ORDER BY e.id LIMIT "
        );
        self.event_rows(sql!(self.driver; [&sql] {limit as i64}))
            .await
    }

    /// Marks events as accepted by the receiver.
    pub(crate) async fn events_delivered(&self, ids: &[i64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut s = Sql::new(self.driver);
        s.push(
            "UPDATE feed_events SET status = 'delivered', attempts = attempts + 1, last_error = ",
        )
        .bind(None::<String>)
        .push(", updated_at = {now} WHERE id IN (")
        .binds(ids.iter().map(|&i| Value::from(i)))
        .push(") AND status = 'pending'");
        self.run(s.statement()).await?;
        Ok(())
    }

    /// Stores a failed delivery attempt: tried again after `retry_in`, or,
    /// with None, `failed` for good (kept, and retried on request).
    pub(crate) async fn event_attempt_failed(
        &self,
        id: i64,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<()> {
        let (status, delay) = match retry_in {
            Some(d) => ("pending", d.as_millis() as i64),
            None => ("failed", 0),
        };
        self.run(sql!(self.driver;
            "UPDATE feed_events SET status = " {status} ", attempts = attempts + 1, last_error = " {super::sanitize_error(error)} ", \
             not_before = {now} + " {delay} ", updated_at = {now} WHERE id = " {id} " AND status = 'pending'"
        ))
        .await?;
        Ok(())
    }

    /// Puts failed events back to `pending` with fresh attempts, so the
    /// events worker sends them again; returns how many.
    pub async fn retry_events(&self, scope: EventScope<'_>) -> Result<u64> {
        let mut sql = Sql::new(self.driver);
        sql.push(
            "UPDATE feed_events SET status = 'pending', attempts = 0, not_before = NULL, \
             updated_at = {now} WHERE status = 'failed'",
        );
        match scope {
            EventScope::All => {}
            EventScope::Partition(p) => {
                validate::filter("partition id", p)?;
                sql.push(" AND partition_id = ").bind(p);
            }
            EventScope::Event(id) => {
                sql.push(" AND id = ").bind(id);
            }
        }
        self.run(sql.statement()).await
    }

    /// Events older than `age` ms whose delivery did not fail.
    pub(super) async fn count_old_events(&self, age: i64) -> Result<u64> {
        let rows = self
            .fetch(sql!(self.driver; "SELECT COUNT(*) AS n FROM feed_events WHERE " [OLD_BEFORE] {age}))
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| Error::NotFound("counts".into()))?;
        Ok(get::<i64>(r, "n")? as u64)
    }

    /// Deletes events older than `age` ms whose delivery did not fail,
    /// [`PRUNE_BATCH`] per statement.
    pub(super) async fn prune_events(&self, age: i64) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let ids: Vec<Value> = self
                .fetch(sql!(self.driver;
                    "SELECT id FROM feed_events WHERE " [OLD_BEFORE] {age}
                    " ORDER BY id LIMIT " {PRUNE_BATCH as i64}
                ))
                .await?
                .iter()
                .map(|r| Ok(get::<i64>(r, "id")?.into()))
                .collect::<Result<_>>()?;
            if ids.is_empty() {
                return Ok(deleted);
            }
            let n = ids.len();
            let mut s = Sql::new(self.driver);
            s.push("DELETE FROM feed_events WHERE id IN (")
                .binds(ids)
                .push(") AND ")
                .push(OLD_BEFORE)
                .bind(age);
            deleted += self.run(s.statement()).await?;
            if n < PRUNE_BATCH {
                return Ok(deleted);
            }
        }
    }
}

/// Events retention deletes: not `failed`, and older than the age bound
/// next.
const OLD_BEFORE: &str = "status <> 'failed' AND created_at < {now} - ";
/// Events deleted per statement at the most.
const PRUNE_BATCH: usize = 1000;
