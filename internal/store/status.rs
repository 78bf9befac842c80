//! What `processor status` shows: partitions, items, failures, processors.

use super::driver::{Sql, sql};
use std::collections::BTreeMap;

use sea_orm::{FromQueryResult, Value};
use serde::Serialize;

use super::listing::{ItemView, PARTITION_COLUMNS, PartitionView, partition_row};
use super::{Store, get};
use crate::{Result, validate};

/// At most this many partitions and failed items are listed.
pub const LIST_LIMIT: usize = 500;

/// A snapshot of the queue. The JSON form is stable: fields are only added.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct Status {
    /// Number of partitions per status.
    pub partitions_by_status: BTreeMap<String, i64>,
    /// Partitions (all, or the one asked), at most [`LIST_LIMIT`].
    pub partitions: Vec<PartitionView>,
    /// Failed items with their attempts and last error, at most [`LIST_LIMIT`].
    pub failed_items: Vec<ItemView>,
    /// Items of the partitions listed that failed an attempt and wait to
    /// be tried again (`available`, attempts above 0), with their last
    /// error, at most [`LIST_LIMIT`].
    pub retrying_items: Vec<ItemView>,
    /// Live and not yet reaped processor sessions.
    pub processors: Vec<ProcessorStatus>,
    /// Completion events waiting to be delivered (of the partition asked,
    /// or all).
    pub events_pending: i64,
    /// Completion events kept as failed (delivery gave up); `processor
    /// events retry` sends them again.
    pub events_failed: i64,
    /// The fleet's backlog by tenant (whichever partition was asked):
    /// ready now with the age of the oldest, scheduled, retrying.
    pub backlog: Vec<super::backlog::TenantBacklog>,
    /// The fleet's results per second over the last 1, 5 and 15 minutes.
    pub throughput: super::throughput::Throughput,
    /// The handler as the fleet saw it over the last 5 minutes: its
    /// state, calls per second, failed share and latency percentiles.
    pub handler: crate::recent::HandlerState,
    /// Items' queue wait (ready to delivered) over the last 5 minutes,
    /// fleet-wide; None when nothing was delivered.
    pub queue_wait: Option<crate::recent::Percentiles>,
}

/// A processor session.
#[derive(Debug, Serialize, FromQueryResult)]
#[non_exhaustive]
pub struct ProcessorStatus {
    /// Session id.
    pub id: String,
    /// Host it runs on.
    pub hostname: String,
    /// Its process id.
    pub pid: i64,
    /// Feed version.
    pub software_version: String,
    /// Registered at (epoch ms, database clock).
    pub started_at: i64,
    /// Last heartbeat (epoch ms, database clock).
    pub heartbeat_at: i64,
    /// Milliseconds since the last heartbeat.
    #[sea_orm(from_alias = "age")]
    pub heartbeat_age_ms: i64,
    /// Active partitions it holds.
    #[sea_orm(from_alias = "n")]
    pub partitions: i64,
    /// Items per second it holds itself to after the handler answered
    /// "too many" (429, or 503 with `Retry-After`); None = not held back.
    pub send_rate: Option<f64>,
    /// Why its dispatch holds off (the handler not there, the circuit
    /// breaker open: the handler's URL and the last error); None = it
    /// dispatches.
    pub held_reason: Option<String>,
    /// Since when its dispatch holds off (epoch ms, database clock).
    pub held_since: Option<i64>,
    /// Its last five minutes, as of its last heartbeat (None: not
    /// written yet, or unreadable).
    #[sea_orm(skip)]
    pub figures: Option<crate::recent::Figures>,
    /// The stored `figures` JSON.
    #[serde(skip)]
    #[sea_orm(from_alias = "figures")]
    stored_figures: Option<String>,
}

impl ProcessorStatus {
    /// The fleet's figures, merged from `list`.
    pub fn fleet(list: &[ProcessorStatus]) -> crate::recent::Fleet {
        crate::recent::Fleet::merge(
            list.iter().filter_map(|p| p.figures.as_ref()),
            list.iter().filter_map(|p| p.held_reason.as_deref()),
        )
    }
}

/// Rows of one status with their count (`status, COUNT(*) AS n`).
#[derive(FromQueryResult)]
struct StatusCount {
    status: String,
    n: i64,
}

impl Store {
    /// Reads a status snapshot, of one partition or of all.
    ///
    /// ```no_run
    /// # async fn f(store: feed::Store) -> feed::Result<()> {
    /// let s = store.status(Some("folder-1")).await?;
    /// for item in &s.failed_items {
    ///     eprintln!("{} failed after {} attempts: {:?}", item.id, item.attempts, item.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, partition: Option<&str>) -> Result<Status> {
        if let Some(p) = partition {
            validate::filter("partition id", p)?;
        }
        let of = |text: &str, rest: &str| {
            let mut s = Sql::new(self.driver);
            s.push(text);
            if let Some(p) = partition {
                s.push(" WHERE id = ").bind(p);
            }
            s.push(rest);
            s.statement()
        };
        let mut partitions_by_status = BTreeMap::new();
        for r in self
            .fetch(of(
                "SELECT status, COUNT(*) AS n FROM feed_partitions",
                " GROUP BY status",
            ))
            .await?
        {
            let c = StatusCount::from_query_result(&r, "")?;
            partitions_by_status.insert(c.status, c.n);
        }
        let rows = self
            .fetch(of(
                &format!("SELECT {PARTITION_COLUMNS} FROM feed_partitions"),
                &format!(
                    " ORDER BY CASE status WHEN 'failed' THEN 0 WHEN 'available' THEN 1 ELSE 2 END, \
                     id LIMIT {LIST_LIMIT}"
                ),
            ))
            .await?;
        let mut partitions = rows.iter().map(partition_row).collect::<Result<Vec<_>>>()?;
        let ids: Vec<String> = partitions.iter().map(|p| p.id.clone()).collect();
        self.add_counts(&mut partitions, &ids).await?;
        let failed_items = self
            .item_views(|s| {
                s.push(" WHERE i.status = 'failed'");
                if let Some(p) = partition {
                    s.push(" AND i.partition_id = ").bind(p);
                }
                s.push(&format!(
                    " ORDER BY i.partition_id, i.id LIMIT {LIST_LIMIT}"
                ));
            })
            .await?;
        let retrying_items = self.retrying_items(&ids, LIST_LIMIT).await?;
        let processors = self.processors().await?;
        let (events_pending, events_failed) = self.event_backlog(partition).await?;
        let backlog = self.recent_backlog().await?;
        let throughput = self.throughput().await?;
        let fleet = ProcessorStatus::fleet(&processors);
        Ok(Status {
            backlog,
            throughput,
            handler: fleet.handler,
            queue_wait: fleet.queue_wait,
            partitions_by_status,
            partitions,
            failed_items,
            retrying_items,
            processors,
            events_pending,
            events_failed,
        })
    }
}

impl Store {
    /// Up to `limit` items of `partitions` waiting to retry after a failed
    /// attempt, with their last error (read through the ready index, one
    /// partition's available items at a time, as the item counts are).
    pub async fn retrying_items(
        &self,
        partitions: &[String],
        limit: usize,
    ) -> Result<Vec<ItemView>> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        self.item_views(|s| {
            s.push(" WHERE i.partition_id IN (")
                .binds(partitions.iter().map(|p| Value::from(p.as_str())))
                .push(&format!(
                    ") AND i.status = 'available' AND i.attempts > 0 \
                     ORDER BY i.partition_id, i.id LIMIT {limit}"
                ));
        })
        .await
    }

    /// Processor sessions (live and not yet reaped) with the partitions each holds.
    pub async fn processors(&self) -> Result<Vec<ProcessorStatus>> {
        self.fetch(sql!(self.driver;
            "SELECT s.id, s.hostname, s.pid, s.software_version, s.started_at, s.heartbeat_at, s.send_rate, \
                 s.held_reason, s.held_since, s.figures, \
                 {now} - s.heartbeat_at AS age, COALESCE(h.n, 0) AS n \
                 FROM feed_processors s LEFT JOIN (SELECT owner, COUNT(*) AS n FROM feed_partitions \
                 WHERE status = 'available' AND owner IS NOT NULL GROUP BY owner) h ON h.owner = s.id \
                 ORDER BY s.started_at"
        ))
            .await?
            .iter()
            .map(|r| {
                let mut p = ProcessorStatus::from_query_result(r, "")?;
                p.figures = p.stored_figures.as_deref().and_then(|j| serde_json::from_str(j).ok());
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()
    }

    /// One item's data bytes: item `id` of `partition`, or of the one
    /// partition with an item by that id (see [`Store::locate`]).
    pub async fn item_data(&self, partition: Option<&str>, id: &str) -> Result<Vec<u8>> {
        let partition = self.locate(partition, id).await?;
        let sql = format!(
            "SELECT {} AS data FROM feed_items i WHERE i.partition_id = ",
            self.driver.data_column("i")
        );
        let rows = self
            .fetch(sql!(self.driver; [&sql] {partition} " AND i.id = " {id}))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| crate::Error::NotFound(format!("item {id}")))?;
        get(row, "data")
    }
}
