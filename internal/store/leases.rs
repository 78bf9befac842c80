//! Leases: counting, taking, releasing and stealing partitions, and
//! reopening partitions that a plain-SQL producer left stranded.

use std::time::Duration;

use sea_orm::FromQueryResult;

use super::{Store, get, ms};
use crate::{Error, Result};

/// A test, for a partition aliased `p`, that it has an item ready to run
/// now: not paused, and an item available at its gate past its `not_before`.
pub(crate) const READY: &str = "NOT p.paused AND EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id \
     AND r.status = 'available' AND r.gate = p.gate AND (r.not_before IS NULL OR r.not_before <= {now}))";

/// A test, for a partition aliased `p`, that a gate check would act on it:
/// nothing is available at its gate, and an item is available below it,
/// or a failed item blocks it, or work waits at a later gate, or nothing is
/// left and it closes by itself. It mirrors the gate decision so that idle
/// partitions cost nothing to re-derive.
const STUCK: &str = "NOT EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id \
     AND r.status = 'available' AND r.gate = p.gate) AND ( \
     EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND r.status = 'available' AND r.gate < p.gate) \
     OR (p.on_failure <> 'continue' AND EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND r.status = 'failed')) \
     OR (NOT p.manual_checkpoint AND EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND r.status = 'available' AND r.gate > p.gate)) \
     OR (p.auto_close AND NOT EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND r.status = 'available')))";

/// Live sessions' ids; takes the expiry in milliseconds.
const LIVE: &str = "(SELECT id FROM feed_processors WHERE heartbeat_at >= {now} - ?)";

/// Session and partition counts for one balancing decision.
#[derive(Clone, Copy, Debug, FromQueryResult)]
pub struct LeaseCounts {
    /// Live sessions (heartbeat within the expiry).
    pub sessions: i64,
    /// Of those, sessions with a `--max-partitions` cap.
    pub capped: i64,
    /// Partitions with status `available`.
    pub active: i64,
    /// Of those, owned by this session.
    pub mine: i64,
    /// Active partitions nobody live holds that have work ready now.
    pub free_ready: i64,
    /// Available items in the partitions this session holds.
    pub backlog: i64,
    /// `complete` partitions that have an available item (added by hand).
    pub stranded: i64,
}

/// A partition this session holds, as one acquire cycle sees it.
#[derive(Clone, Debug, FromQueryResult)]
pub struct HeldRow {
    /// Partition id.
    pub id: String,
    /// OCC version; a change means someone else wrote the partition.
    pub version: i64,
    /// It has an item ready to run now.
    pub ready: bool,
    /// A gate check would act on it (advance, close, fail).
    pub stuck: bool,
}

/// A partition nobody live holds.
#[derive(Clone, Debug, FromQueryResult)]
pub struct FreeRow {
    /// Partition id.
    pub id: String,
    /// OCC version to lease it with.
    pub version: i64,
    /// It has an item ready to run now.
    pub ready: bool,
}

impl Store {
    /// Everything one balancing decision needs, in one statement.
    pub(crate) async fn lease_counts(&self, me: &str, expiry: Duration) -> Result<LeaseCounts> {
        let e = ms(expiry);
        let rows = self
            .query(
                &format!(
                    "SELECT \
                     (SELECT COUNT(*) FROM feed_processors WHERE heartbeat_at >= {{now}} - ?) AS sessions, \
                     (SELECT COUNT(*) FROM feed_processors WHERE heartbeat_at >= {{now}} - ? AND max_partitions IS NOT NULL) AS capped, \
                     (SELECT COUNT(*) FROM feed_partitions WHERE status = 'available') AS active, \
                     (SELECT COUNT(*) FROM feed_partitions WHERE status = 'available' AND owner = ?) AS mine, \
                     (SELECT COUNT(*) FROM feed_partitions p WHERE p.status = 'available' \
                      AND (p.owner IS NULL OR p.owner NOT IN {LIVE}) AND {READY}) AS free_ready, \
                     (SELECT COUNT(*) FROM feed_partitions p JOIN feed_items i ON i.partition_id = p.id \
                      WHERE p.owner = ? AND p.status = 'available' AND i.status = 'available') AS backlog, \
                     (SELECT COUNT(*) FROM feed_partitions p WHERE p.status = 'complete' AND EXISTS \
                      (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND r.status = 'available')) AS stranded"
                ),
                vec![e.into(), e.into(), me.into(), e.into(), me.into()],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::NotFound("lease counts".into()))?;
        Ok(LeaseCounts::from_query_result(row, "")?)
    }

    /// The caps of the live sessions that have one.
    pub(crate) async fn session_caps(&self, expiry: Duration) -> Result<Vec<i64>> {
        let rows = self
            .query(
                "SELECT max_partitions FROM feed_processors \
                 WHERE heartbeat_at >= {now} - ? AND max_partitions IS NOT NULL",
                vec![ms(expiry).into()],
            )
            .await?;
        rows.iter().map(|r| get(r, "max_partitions")).collect()
    }

    /// Up to `limit` active partitions whose owner is NULL or not a live
    /// session, those with work ready first.
    pub(crate) async fn free_partitions(
        &self,
        expiry: Duration,
        limit: usize,
    ) -> Result<Vec<FreeRow>> {
        let rows = self
            .query(
                &format!(
                    "SELECT p.id, p.version, CASE WHEN {READY} THEN TRUE ELSE FALSE END AS ready \
                     FROM feed_partitions p WHERE p.status = 'available' AND \
                     (p.owner IS NULL OR p.owner NOT IN {LIVE}) ORDER BY ready DESC LIMIT ?"
                ),
                vec![ms(expiry).into(), (limit as i64).into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok(FreeRow::from_query_result(r, "")?))
            .collect()
    }

    /// Takes a partition by OCC: succeeds only if nobody changed it since it was read.
    pub(crate) async fn lease(&self, id: &str, version: i64, me: &str) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET owner = ?, version = version + 1, updated_at = {now} \
                 WHERE id = ? AND version = ? AND status = 'available'",
                vec![me.into(), id.into(), version.into()],
            )
            .await?;
        Ok(n == 1)
    }

    /// Gives one held partition back (OCC, owner-fenced), to make room.
    pub(crate) async fn release(&self, id: &str, version: i64, me: &str) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET owner = NULL, version = version + 1, updated_at = {now} \
                 WHERE id = ? AND version = ? AND owner = ?",
                vec![id.into(), version.into(), me.into()],
            )
            .await?;
        Ok(n == 1)
    }

    /// The active partitions `me` holds, each with whether it has work
    /// ready and whether a gate check would act on it: the level-triggered
    /// view of every held partition, in one statement.
    pub(crate) async fn held_partitions(&self, me: &str) -> Result<Vec<HeldRow>> {
        let rows = self
            .query(
                &format!(
                    "SELECT p.id, p.version, CASE WHEN {READY} THEN TRUE ELSE FALSE END AS ready, \
                     CASE WHEN {STUCK} THEN TRUE ELSE FALSE END AS stuck \
                     FROM feed_partitions p WHERE p.owner = ? AND p.status = 'available'"
                ),
                vec![me.into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok(HeldRow::from_query_result(r, "")?))
            .collect()
    }

    /// Active partitions owned by `owner`, with their versions (to steal one).
    pub(crate) async fn partitions_of(&self, owner: &str) -> Result<Vec<(String, i64)>> {
        let rows = self
            .query(
                "SELECT id, version FROM feed_partitions WHERE owner = ? AND status = 'available'",
                vec![owner.into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((get(r, "id")?, get(r, "version")?)))
            .collect()
    }

    /// The live session holding the most active partitions, with its count.
    pub(crate) async fn most_loaded(&self, expiry: Duration) -> Result<Option<(String, i64)>> {
        let rows = self
            .query(
                "SELECT p.owner AS owner, COUNT(*) AS n FROM feed_partitions p \
                 JOIN feed_processors s ON s.id = p.owner \
                 WHERE p.status = 'available' AND s.heartbeat_at >= {now} - ? \
                 GROUP BY p.owner ORDER BY n DESC LIMIT 1",
                vec![ms(expiry).into()],
            )
            .await?;
        rows.first()
            .map(|r| Ok((get(r, "owner")?, get(r, "n")?)))
            .transpose()
    }

    /// Releases every partition owned by `me` so others can take them at once.
    pub(crate) async fn release_all(&self, me: &str) -> Result<u64> {
        self.exec(
            "UPDATE feed_partitions SET owner = NULL, version = version + 1, updated_at = {now} \
             WHERE owner = ?",
            vec![me.into()],
        )
        .await
    }

    /// Reopens `complete` partitions that have an available item (a
    /// producer inserted it with plain SQL without reopening the partition).
    pub(crate) async fn reopen_stranded(&self) -> Result<u64> {
        self.exec(
            "UPDATE feed_partitions SET status = 'available', version = version + 1, updated_at = {now} \
             WHERE status = 'complete' AND EXISTS (SELECT 1 FROM feed_items r \
             WHERE r.partition_id = feed_partitions.id AND r.status = 'available')",
            vec![],
        )
        .await
    }
}
