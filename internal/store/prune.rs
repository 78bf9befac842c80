//! Retention: deleting finished (`complete` and `cancelled`) partitions and
//! their items, and the maintenance lease that lets one processor at a time
//! do it.
//!
//! Deletes go in small batches of ids, each its own short statement, so
//! producers and processors are never blocked behind one long delete. Every
//! delete re-checks its guard in the same statement: an item is deleted only
//! if it is not `available` and its partition is still finished and old, and
//! a partition only once it has no items (the foreign key refuses it
//! otherwise). A partition reopened or retried meanwhile is left alone, so
//! nothing unfinished is ever deleted. `failed` partitions are never pruned.

use std::time::Duration;

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::dialect::marks;
use super::{Store, get, ms};
use crate::Result;

/// Partitions looked at per batch.
const PARTITION_BATCH: i64 = 100;
/// Items deleted per statement.
const ITEM_BATCH: i64 = 500;
/// The statuses that retention deletes.
const FINISHED: &str = "status IN ('complete', 'cancelled')";

/// What [`Store::prune`] deleted (or, in a dry run, would delete).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Partitions.
    pub partitions: u64,
    /// Items.
    pub items: u64,
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
        }
    }
}

impl Store {
    /// Deletes `complete` and `cancelled` partitions last updated more than
    /// `older_than` ago (database clock), with their items; with `dry_run`
    /// only counts them.
    pub async fn prune(&self, older_than: Duration, dry_run: bool) -> Result<Pruned> {
        let age = ms(older_than);
        if dry_run {
            return self.count_prunable(age).await;
        }
        let mut done = Pruned::default();
        let mut after = String::new();
        loop {
            let ids: Vec<String> = self
                .query(
                    &format!(
                        "SELECT id FROM feed_partitions WHERE {FINISHED} AND updated_at < {{now}} - ? \
                         AND id > ? ORDER BY id LIMIT ?"
                    ),
                    vec![age.into(), after.clone().into(), PARTITION_BATCH.into()],
                )
                .await?
                .iter()
                .map(|r| get(r, "id"))
                .collect::<Result<_>>()?;
            let Some(last) = ids.last() else {
                return Ok(done);
            };
            after = last.clone();
            for id in &ids {
                done.items += self.prune_items(id, age).await?;
                done.partitions += self.prune_partition(id, age).await?;
                tokio::task::yield_now().await;
            }
        }
    }

    async fn count_prunable(&self, age: i64) -> Result<Pruned> {
        let rows = self
            .query(
                &format!(
                    "SELECT (SELECT COUNT(*) FROM feed_partitions WHERE {FINISHED} \
                     AND updated_at < {{now}} - ?) AS parts, \
                     (SELECT COUNT(*) FROM feed_items i JOIN feed_partitions p ON p.id = i.partition_id \
                     WHERE p.{FINISHED} AND p.updated_at < {{now}} - ?) AS items"
                ),
                vec![age.into(), age.into()],
            )
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| crate::Error::NotFound("counts".into()))?;
        Ok(PrunableCounts::from_query_result(r, "")?.into())
    }

    async fn prune_items(&self, partition: &str, age: i64) -> Result<u64> {
        let mut deleted = 0;
        let mut after = String::new();
        loop {
            let ids: Vec<sea_orm::Value> = self
                .query(
                    "SELECT id FROM feed_items WHERE partition_id = ? AND id > ? ORDER BY id LIMIT ?",
                    vec![partition.into(), after.clone().into(), ITEM_BATCH.into()],
                )
                .await?
                .iter()
                .map(|r| get::<String>(r, "id").map(Into::into))
                .collect::<Result<_>>()?;
            let Some(sea_orm::Value::String(Some(last))) = ids.last().cloned() else {
                return Ok(deleted);
            };
            after = last.to_string();
            let n = ids.len();
            let mut values = ids;
            values.extend([partition.into(), age.into()]);
            let sql = format!(
                "DELETE FROM feed_items WHERE id IN ({}) AND status <> 'available' \
                 AND EXISTS (SELECT 1 FROM feed_partitions p WHERE p.id = ? AND p.{FINISHED} \
                 AND p.updated_at < {{now}} - ?)",
                marks(n)
            );
            let removed = self.exec(&sql, values).await?;
            if removed == 0 {
                // The partition was reopened or touched: leave it.
                return Ok(deleted);
            }
            deleted += removed;
        }
    }

    async fn prune_partition(&self, id: &str, age: i64) -> Result<u64> {
        let sql = format!(
            "DELETE FROM feed_partitions WHERE id = ? AND {FINISHED} AND updated_at < {{now}} - ? \
             AND NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.partition_id = ?)"
        );
        match self
            .exec(&sql, vec![id.into(), age.into(), id.into()])
            .await
        {
            Ok(n) => Ok(n),
            // An item was added meanwhile: the foreign key keeps the partition.
            Err(crate::Error::Db(e)) if e.to_string().to_lowercase().contains("foreign key") => {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes or renews the maintenance lease `name` for `holder` for `ttl`;
    /// false while another holder's lease has not expired. One row per
    /// task, written with one conditional update (the database clock decides).
    pub async fn lease_maintenance(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_maintenance SET holder = ?, expires_at = {now} + ? \
                 WHERE name = ? AND (holder IS NULL OR holder = ? OR expires_at < {now})",
                vec![holder.into(), ms(ttl).into(), name.into(), holder.into()],
            )
            .await?;
        Ok(n == 1)
    }
}
