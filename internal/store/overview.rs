//! The overview page's read model: partitions by status, items completed
//! per minute over the last hour (counted into `feed_completions` as
//! results are written), the processors and the completion events waiting
//! or failed.

use super::driver::sql;
use std::collections::BTreeMap;

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::Store;
use super::status::ProcessorStatus;
use crate::Result;

/// What the overview page shows.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct Overview {
    /// Partitions per status.
    pub partitions_by_status: BTreeMap<String, i64>,
    /// Paused partitions.
    pub paused: i64,
    /// (minute start in epoch ms, items completed), last hour, oldest first.
    pub completed_per_minute: Vec<(i64, i64)>,
    /// Processor sessions.
    pub processors: Vec<ProcessorStatus>,
    /// The database clock (epoch ms).
    pub now: i64,
    /// Completion events waiting to be delivered.
    pub events_pending: i64,
    /// Completion events kept as failed (delivery gave up).
    pub events_failed: i64,
    /// Results per second over the last 1, 5 and 15 minutes.
    pub throughput: super::throughput::Throughput,
    /// The backlog by tenant (a recent count: see [`Store::recent_backlog`]).
    pub backlog: Vec<super::backlog::TenantBacklog>,
    /// The handler's state and the queue wait over the last 5 minutes.
    pub fleet: crate::recent::Fleet,
    /// Whether the database takes writes (a primary); None where that
    /// cannot be told.
    pub primary: Option<bool>,
}

/// Partitions of one status and pause state (`status, paused, COUNT(*) AS n`).
#[derive(FromQueryResult)]
struct PausedCount {
    status: String,
    paused: bool,
    n: i64,
}

/// Items completed in one minute (`minute AS bucket, items AS n`).
#[derive(FromQueryResult)]
struct MinuteCount {
    bucket: i64,
    n: i64,
}

impl Store {
    /// Adds results written now (items completed, attempts retried, items
    /// failed) to the current minute's counts (by the database clock),
    /// which the overview's chart and the throughput read: 60 rows for
    /// the hour, however many results were written in it.
    pub(crate) async fn add_completions(&self, [items, retried, failed]: [u64; 3]) -> Result<()> {
        self.run(sql!(self.driver;
            "INSERT INTO feed_completions (minute, items, retried, failed) VALUES ({now} - ({now} % 60000), "
            {items as i64} ", " {retried as i64} ", " {failed as i64} ")" [self.driver.dialect().add_to_minute]
        ))
        .await?;
        Ok(())
    }

    /// Partitions by status, items completed per minute over the last hour
    /// and the processors.
    pub async fn overview(&self) -> Result<Overview> {
        let mut partitions_by_status = BTreeMap::new();
        let mut paused = 0;
        for r in self
            .fetch(sql!(self.driver;
                "SELECT status, paused, COUNT(*) AS n FROM feed_partitions GROUP BY status, paused"
            ))
            .await?
        {
            let c = PausedCount::from_query_result(&r, "")?;
            if c.paused {
                paused += c.n;
            }
            *partitions_by_status.entry(c.status).or_default() += c.n;
        }
        let completed_per_minute = self
            .fetch(sql!(self.driver;
                "SELECT minute AS bucket, items AS n FROM feed_completions \
                     WHERE minute >= {now} - 3600000 ORDER BY minute"
            ))
            .await?
            .iter()
            .map(|r| {
                let c = MinuteCount::from_query_result(r, "")?;
                Ok((c.bucket, c.n))
            })
            .collect::<Result<Vec<_>>>()?;
        let (events_pending, events_failed) = self.event_backlog(None).await?;
        let processors = self.processors().await?;
        Ok(Overview {
            fleet: ProcessorStatus::fleet(&processors),
            primary: self.takes_writes().await?,
            partitions_by_status,
            paused,
            completed_per_minute,
            processors,
            now: self.now_ms().await?,
            events_pending,
            events_failed,
            throughput: self.throughput().await?,
            backlog: self.recent_backlog().await?,
        })
    }
}

/// `v`: whether the server is read-only, as the backend says it.
#[derive(FromQueryResult)]
struct ReadOnly {
    v: String,
}

impl Store {
    /// Whether the database takes writes: on PostgreSQL not a standby
    /// nor a read-only server (`transaction_read_only`), on MariaDB and
    /// MySQL not `read_only`; SQLite always does.
    pub async fn takes_writes(&self) -> Result<Option<bool>> {
        let ask = match self.backend() {
            sea_orm::DbBackend::Postgres => {
                sql!(self.driver; "SELECT current_setting('transaction_read_only') AS v")
            }
            sea_orm::DbBackend::MySql => {
                sql!(self.driver; "SELECT CAST(@@global.read_only AS CHAR) AS v")
            }
            _ => return Ok(Some(true)),
        };
        let rows = self.fetch(ask).await?;
        Ok(rows
            .first()
            .map(|r| ReadOnly::from_query_result(r, ""))
            .transpose()?
            .map(|r| matches!(r.v.to_ascii_lowercase().as_str(), "off" | "0")))
    }
}
