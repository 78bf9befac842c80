//! Retention: deleting finished (`complete` and `cancelled`) partitions and
//! their items, and the maintenance lease that lets one processor at a time
//! do it.
//!
//! Partitions are taken a page at a time, and each statement works on the
//! whole page: a million one-item partitions take a few thousand
//! statements, not two per partition. Every statement is short (at most
//! [`ITEM_BATCH`] items or one page of partitions), so producers and
//! processors are never blocked behind one long delete, and each re-checks
//! its guard in the same statement: an item is deleted only if it is not
//! `available` and its partition is still finished and old, and a partition
//! only once it has no items (the foreign key refuses it otherwise). A
//! partition reopened or retried meanwhile is left alone, so nothing
//! unfinished is ever deleted. `failed` partitions are never pruned.
//!
//! Completion events older than the cutoff go too, unless their delivery
//! failed: those stay until retried (or deleted by hand).

use super::driver::sql;
use std::time::Duration;

use sea_orm::{FromQueryResult, Statement, Value};
use serde::Serialize;

use super::driver::{Clocked, Sql};
use super::{Store, get, ms};
use crate::Result;
use crate::ids::SessionId;

/// Partitions per page: few enough to bind in one statement everywhere.
const PARTITION_BATCH: i64 = 1000;
/// Items deleted per statement at the most.
const ITEM_BATCH: i64 = 5000;
/// The statuses that retention deletes.
const FINISHED: &str = "status IN ('complete', 'cancelled')";

/// What [`Store::prune`] deleted (or, in a dry run, would delete).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Pruned {
    /// Partitions.
    pub partitions: u64,
    /// Items.
    pub items: u64,
    /// Completion events (delivered or pending; failed ones are kept
    /// until retried or deleted by hand).
    pub events: u64,
}

/// [`Pruned`] as counted: COUNT(*) is a signed BIGINT on every backend.
#[derive(FromQueryResult)]
struct PrunableCounts {
    parts: i64,
    items: i64,
}

impl From<PrunableCounts> for Pruned {
    fn from(c: PrunableCounts) -> Self {
        Pruned {
            partitions: c.parts as u64,
            items: c.items as u64,
            events: 0,
        }
    }
}

impl Store {
    /// Deletes `complete` and `cancelled` partitions last updated more than
    /// `older_than` ago (database clock), with their items, and the
    /// overview's per-minute counts as old (the last hour stays); with
    /// `dry_run` only counts the partitions and items.
    pub async fn prune(&self, older_than: Duration, dry_run: bool) -> Result<Pruned> {
        let age = ms(older_than);
        if dry_run {
            let mut counted = self.count_prunable(age).await?;
            counted.events = self.count_old_events(age).await?;
            return Ok(counted);
        }
        // The overview's per-minute counts before the cutoff; its chart
        // reads the last hour only.
        self.run(sql!(self.driver;
            "DELETE FROM feed_completions WHERE minute < {now} - " {age} " AND minute < {now} - 3600000"
        ))
        .await?;
        let mut done = Pruned {
            events: self.prune_events(age).await?,
            ..Pruned::default()
        };
        let mut after = String::new();
        loop {
            let page: Vec<String> = self
                .fetch(sql!(self.driver;
                    "SELECT id FROM feed_partitions WHERE " [FINISHED] " AND updated_at < {now} - " {age}
                    " AND id > " {after.as_str()} " ORDER BY id LIMIT " {PARTITION_BATCH}
                ))
                .await?
                .iter()
                .map(|r| get(r, "id"))
                .collect::<Result<_>>()?;
            let Some(last) = page.last() else {
                return Ok(done);
            };
            after = last.clone();
            done.items += self.prune_items(&page, age).await?;
            done.partitions += self.prune_partitions(&page, age).await?;
        }
    }

    async fn count_prunable(&self, age: i64) -> Result<Pruned> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT (SELECT COUNT(*) FROM feed_partitions WHERE " [FINISHED]
                " AND updated_at < {now} - " {age} ") AS parts, \
                 (SELECT COUNT(*) FROM feed_items i JOIN feed_partitions p ON p.id = i.partition_id \
                 WHERE p." [FINISHED] " AND p.updated_at < {now} - " {age} ") AS items"
            ))
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| crate::Error::NotFound("counts".into()))?;
        Ok(PrunableCounts::from_query_result(r, "")?.into())
    }

    /// Deletes the finished items of a page of partitions, [`ITEM_BATCH`]
    /// per statement, until a statement finds fewer.
    async fn prune_items(&self, page: &[String], age: i64) -> Result<u64> {
        let partition_ok = format!("p.{FINISHED} AND p.updated_at < {{now}} - ");
        let st = self
            .driver
            .item_delete(page, &partition_ok, age, ITEM_BATCH);
        let mut deleted = 0;
        loop {
            let n = self.run(st.clone()).await?;
            deleted += n;
            tokio::task::yield_now().await;
            if n < ITEM_BATCH as u64 {
                return Ok(deleted);
            }
        }
    }

    /// Deletes the page's partitions that are still finished and old and have
    /// no items left, in one statement; one at a time if an item was added
    /// meanwhile (the foreign key then refuses the whole statement).
    async fn prune_partitions(&self, page: &[String], age: i64) -> Result<u64> {
        match self.run(partition_delete(self.driver, page, age)).await {
            Err(e) if is_foreign_key(&e) => {
                let mut deleted = 0;
                for id in page {
                    deleted += match self
                        .run(partition_delete(self.driver, std::slice::from_ref(id), age))
                        .await
                    {
                        Err(e) if is_foreign_key(&e) => 0,
                        r => r?,
                    };
                }
                Ok(deleted)
            }
            r => r,
        }
    }

    /// Takes or renews the maintenance lease `name` for `holder` for `ttl`;
    /// false while another holder's lease has not expired. One row per
    /// task, written with one conditional update (the database clock decides).
    pub(crate) async fn lease_maintenance(
        &self,
        name: &str,
        holder: &SessionId,
        ttl: Duration,
    ) -> Result<bool> {
        let n = self.run(sql!(self.driver;
            "UPDATE feed_maintenance SET holder = " {holder} ", expires_at = {now} + " {ms(ttl)} " \
                 WHERE name = " {name} " AND (holder IS NULL OR holder = " {holder} " OR expires_at < {now})"
        ))
            .await?;
        Ok(n == 1)
    }
}

impl Store {
    /// Gives up a `feed_maintenance` lease held by `holder`, so another
    /// processor takes it at once rather than when it expires.
    pub(crate) async fn release_maintenance(&self, name: &str, holder: &SessionId) -> Result<()> {
        self.run(sql!(self.driver;
            "UPDATE feed_maintenance SET holder = NULL, expires_at = 0 WHERE name = " {name} " AND holder = " {holder}
        ))
        .await?;
        Ok(())
    }
}

/// Deletes the partitions of `page` that are still finished and older
/// than `age` and have no items.
fn partition_delete(d: Clocked, page: &[String], age: i64) -> Statement {
    let mut s = Sql::new(d);
    s.push("DELETE FROM feed_partitions WHERE id IN (")
        .binds(page.iter().map(|id| Value::from(id.as_str())))
        .push(&format!(") AND {FINISHED} AND updated_at < {{now}} - "))
        .bind(age)
        .push(
            " AND NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.partition_id = feed_partitions.id)",
        );
    s.statement()
}

/// An item was added to the partition meanwhile: the foreign key keeps it.
fn is_foreign_key(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Db(e) if e.to_string().to_lowercase().contains("foreign key"))
}
