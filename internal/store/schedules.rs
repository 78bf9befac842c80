//! `feed_schedules`: recurring partitions as stored, and the two writes a
//! tick makes: its partition, created only if it is not there yet (so any
//! number of processors create it once), and the schedule moved on to its
//! next tick, only from the tick it read (so one of them moves it).

use sea_orm::{ConnectionTrait, FromQueryResult};
use serde::Serialize;

use super::driver::sql;
use super::enqueue::insert_partition;
use super::insert::{insert_items, statements};
use super::{NewItem, PartitionSpec, Store, get};
use crate::{Result, validate};

/// One schedule as stored (`spec` as JSON, `items` as JSON lines).
#[derive(Clone, Debug, FromQueryResult, Serialize)]
#[non_exhaustive]
pub struct ScheduleRow {
    /// Its name: each tick's partition is `<name>-<tick, RFC 3339 UTC>`.
    pub name: String,
    /// The cron expression (5 fields, or 6 with seconds first).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The settings of the partitions it creates, as JSON.
    pub spec: String,
    /// The items of each partition, as JSON lines.
    #[serde(skip)]
    pub items: String,
    /// Missed ticks created at most when it is late (the latest ones).
    pub backfill: i32,
    /// The next tick to create, epoch milliseconds.
    pub next_tick: i64,
    /// The partition the last tick created.
    pub last_partition: Option<String>,
    /// Why the last tick created nothing, if it did not.
    pub last_error: Option<String>,
    /// When it was last set or ticked, epoch milliseconds.
    pub updated_at: i64,
}

const COLUMNS: &str = "name, cron, timezone, spec, items, backfill, next_tick, last_partition, \
     last_error, updated_at";

impl Store {
    /// Creates or replaces the schedule `row.name` (its last tick is
    /// forgotten), in one transaction.
    pub async fn put_schedule(&self, row: &ScheduleRow) -> Result<()> {
        let b = self.driver;
        let txn = self.begin_write().await?;
        self.bounded(txn.execute_raw(sql!(b;
            "DELETE FROM feed_schedules WHERE name = " {row.name.clone()}
        )))
        .await?;
        self.bounded(txn.execute_raw(sql!(b;
            "INSERT INTO feed_schedules (name, cron, timezone, spec, items, backfill, next_tick, \
             created_at, updated_at) VALUES (" {row.name.clone()} ", " {row.cron.clone()} ", "
            {row.timezone.clone()} ", " {row.spec.clone()} ", " {row.items.clone()} ", "
            {row.backfill} ", " {row.next_tick} ", {now}, {now})"
        )))
        .await?;
        self.bounded(self.commit(txn)).await?;
        Ok(())
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let sql = format!("SELECT {COLUMNS} FROM feed_schedules ORDER BY name");
        self.rows_of(sql!(self.driver; [&sql])).await
    }

    /// Removes a schedule (its partitions stay); false when there was none.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        validate::filter("schedule name", name)?;
        let n = self
            .run(sql!(self.driver; "DELETE FROM feed_schedules WHERE name = " {name}))
            .await?;
        Ok(n > 0)
    }

    /// The schedules whose next tick has come, with the database clock
    /// they were read at (None when none is due): one statement, which
    /// every processor runs twice a second.
    pub async fn due_schedules(&self) -> Result<(Option<i64>, Vec<ScheduleRow>)> {
        let sql = format!(
            "SELECT {COLUMNS}, {{now}} AS now FROM feed_schedules WHERE next_tick <= {{now}} ORDER BY name"
        );
        let rows = self.fetch(sql!(self.driver; [&sql])).await?;
        let now = rows.first().map(|r| get(r, "now")).transpose()?;
        let due = rows
            .iter()
            .map(|r| Ok(ScheduleRow::from_query_result(r, "")?))
            .collect::<Result<Vec<_>>>()?;
        Ok((now, due))
    }

    /// Creates partition `id` with `items`, unless it exists (then nothing
    /// is written): true when this call created it.
    pub(crate) async fn create_once(
        &self,
        id: &str,
        spec: &PartitionSpec,
        items: &[NewItem],
    ) -> Result<bool> {
        let b = self.driver;
        let txn = self.begin_write().await?;
        let created = self
            .bounded(txn.execute_raw(insert_partition(b, id, spec)))
            .await?
            .rows_affected()
            == 1;
        if !created {
            self.bounded(txn.rollback()).await?;
            return Ok(false);
        }
        for run in statements(items) {
            self.bounded(insert_items(&txn, b, id, 0, run)).await?;
        }
        self.bounded(self.commit(txn)).await?;
        Ok(true)
    }

    /// Moves schedule `name` from tick `from` to `to`, recording what the
    /// tick did; false when another processor moved it first (or it was
    /// set again meanwhile).
    pub(crate) async fn advance_schedule(
        &self,
        name: &str,
        from: i64,
        to: i64,
        last_partition: Option<&str>,
        last_error: Option<&str>,
    ) -> Result<bool> {
        let n = self
            .run(sql!(self.driver;
                "UPDATE feed_schedules SET next_tick = " {to} ", last_partition = COALESCE("
                {last_partition} ", last_partition), last_error = " {last_error} ", updated_at = {now} \
                 WHERE name = " {name} " AND next_tick = " {from}
            ))
            .await?;
        Ok(n == 1)
    }

    async fn rows_of(&self, st: sea_orm::Statement) -> Result<Vec<ScheduleRow>> {
        self.fetch(st)
            .await?
            .iter()
            .map(|r| Ok(ScheduleRow::from_query_result(r, "")?))
            .collect()
    }
}
