//! Gate-check queries: reading held partitions and their unfinished items,
//! advancing, closing and failing partitions.

use sea_orm::{ColIdx, DbBackend, FromQueryResult, QueryResult, TryGetError, TryGetable, Value};

use super::ItemStatus;
use super::Store;
use super::dialect::{concat, marks};
use super::producer::OnFailure;
use crate::Result;

/// A partition this processor holds, as read for a gate check.
#[derive(Clone, Debug)]
pub struct HeldPartition {
    /// Partition id.
    pub id: String,
    /// Current gate.
    pub gate: i64,
    /// OCC version.
    pub version: i64,
    /// Close when nothing is left.
    pub auto_close: bool,
    /// Never advance the gate automatically.
    pub manual_checkpoint: bool,
    /// What a failed item does to the partition.
    pub on_failure: OnFailure,
}

/// [`HeldPartition`] as stored: `on_failure` is text.
#[derive(FromQueryResult)]
struct HeldPartitionRow {
    id: String,
    gate: i64,
    version: i64,
    auto_close: bool,
    manual_checkpoint: bool,
    on_failure: String,
}

impl From<HeldPartitionRow> for HeldPartition {
    fn from(r: HeldPartitionRow) -> Self {
        HeldPartition {
            id: r.id,
            gate: r.gate,
            version: r.version,
            auto_close: r.auto_close,
            manual_checkpoint: r.manual_checkpoint,
            on_failure: OnFailure::from_stored(&r.on_failure),
        }
    }
}

/// An item's status as read back from the database: the read side of
/// [`ItemStatus`] (the statuses Feed writes after a handler call), plus
/// `cancelled` (written by operator controls) and any other text a person
/// or a plain-SQL producer wrote by hand, kept as [`ItemState::Unknown`]
/// so that a gate check can fail such items with a message naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemState {
    /// `available`: waiting to run.
    Available,
    /// `complete`: reached its terminal state.
    Complete,
    /// `failed`: exhausted its attempts, or failed for good.
    Failed,
    /// `cancelled`: its partition was cancelled.
    Cancelled,
    /// Any other stored text, as stored.
    Unknown(String),
}

impl ItemState {
    /// Reads the stored text.
    pub fn from_stored(text: &str) -> Self {
        match text {
            "available" => ItemState::Available,
            "complete" => ItemState::Complete,
            "failed" => ItemState::Failed,
            "cancelled" => ItemState::Cancelled,
            other => ItemState::Unknown(other.to_string()),
        }
    }
}

impl From<ItemStatus> for ItemState {
    fn from(s: ItemStatus) -> Self {
        match s {
            ItemStatus::Available => ItemState::Available,
            ItemStatus::Complete => ItemState::Complete,
            ItemStatus::Failed => ItemState::Failed,
        }
    }
}

impl TryGetable for ItemState {
    fn try_get_by<I: ColIdx>(
        res: &QueryResult,
        index: I,
    ) -> std::result::Result<Self, TryGetError> {
        String::try_get_by(res, index).map(|s| ItemState::from_stored(&s))
    }
}

/// A status that some unfinished items of one partition hold at one gate:
/// the gate check asks only whether such items exist, never how many.
#[derive(Clone, Debug, FromQueryResult)]
pub struct GateStatus {
    /// Partition id.
    pub partition_id: String,
    /// Gate.
    pub gate: i64,
    /// Item status as stored (may be one written by hand).
    pub status: ItemState,
}

impl Store {
    /// The held partitions among `ids`, for a gate check.
    pub(crate) async fn partitions_for_check(
        &self,
        me: &str,
        ids: &[String],
    ) -> Result<Vec<HeldPartition>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!(
            "SELECT id, gate, version, auto_close, manual_checkpoint, on_failure FROM feed_partitions \
             WHERE owner = ? AND status = 'available' AND id IN ({})",
            marks(ids.len())
        );
        let mut values: Vec<Value> = vec![me.into()];
        values.extend(ids.iter().map(|i| Value::from(i.clone())));
        let rows = self.query(&sql, values).await?;
        rows.iter()
            .map(|r| Ok(HeldPartitionRow::from_query_result(r, "")?.into()))
            .collect()
    }

    /// The statuses unfinished items (available, failed, or written by
    /// hand) hold, by partition and gate, for many partitions in one statement.
    pub(crate) async fn unfinished_statuses(&self, ids: &[String]) -> Result<Vec<GateStatus>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!(
            "SELECT DISTINCT partition_id, gate, status FROM feed_items \
             WHERE partition_id IN ({}) AND status NOT IN ('complete', 'cancelled')",
            marks(ids.len())
        );
        let rows = self
            .query(&sql, ids.iter().map(|i| Value::from(i.clone())).collect())
            .await?;
        rows.iter()
            .map(|r| Ok(GateStatus::from_query_result(r, "")?))
            .collect()
    }

    /// Moves a held partition to `gate` (OCC, owner-fenced). The same
    /// statement re-checks that nothing available is left below the new
    /// gate, so an item made available meanwhile is never passed over.
    pub async fn advance_gate(&self, p: &HeldPartition, me: &str, gate: i64) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET gate = ?, version = version + 1, updated_at = {now} \
                 WHERE id = ? AND version = ? AND owner = ? AND NOT EXISTS (SELECT 1 FROM feed_items i \
                 WHERE i.partition_id = ? AND i.status = 'available' AND i.gate < ?)",
                vec![
                    gate.into(),
                    p.id.clone().into(),
                    p.version.into(),
                    me.into(),
                    p.id.clone().into(),
                    gate.into(),
                ],
            )
            .await?;
        Ok(n == 1)
    }

    /// Closes (`complete`, re-checking in the same statement that no item
    /// is available) or fails a held partition, and releases it (OCC,
    /// owner-fenced).
    pub async fn finish_partition(
        &self,
        p: &HeldPartition,
        me: &str,
        complete: bool,
    ) -> Result<bool> {
        let (status, recheck) = if complete {
            (
                "complete",
                " AND NOT EXISTS (SELECT 1 FROM feed_items i WHERE i.partition_id = ? AND i.status = 'available')",
            )
        } else {
            ("failed", "")
        };
        let mut values: Vec<Value> = vec![
            status.into(),
            p.id.clone().into(),
            p.version.into(),
            me.into(),
        ];
        if complete {
            values.push(p.id.clone().into());
        }
        let n = self
            .exec(
                &format!(
                    "UPDATE feed_partitions SET status = ?, owner = NULL, version = version + 1, \
                     updated_at = {{now}} WHERE id = ? AND version = ? AND owner = ?{recheck}"
                ),
                values,
            )
            .await?;
        Ok(n == 1)
    }

    /// Fails items whose status Feed cannot act on in a held partition:
    /// available below the partition's gate (they could never run) or an
    /// unknown status. Each gets a `last_error` that says what to do.
    pub(crate) async fn fail_unrunnable(&self, p: &HeldPartition, me: &str) -> Result<u64> {
        let below = format!(
            "item gate is below its partition's gate {}; it can never run. \
             Run `processor retry` to run it at the partition's gate",
            p.gate
        );
        let owned = "EXISTS (SELECT 1 FROM feed_partitions p WHERE p.id = ? AND p.owner = ?)";
        let n = self
            .exec(
                &format!(
                    "UPDATE feed_items SET status = 'failed', last_error = ?, version = version + 1, \
                     updated_at = {{now}} WHERE partition_id = ? AND status = 'available' AND gate < ? AND {owned}"
                ),
                vec![
                    below.into(),
                    p.id.clone().into(),
                    p.gate.into(),
                    p.id.clone().into(),
                    me.into(),
                ],
            )
            .await?;
        let m = self
            .exec(
                &format!(
                    "UPDATE feed_items SET last_error = {}, status = 'failed', version = version + 1, \
                     updated_at = {{now}} WHERE partition_id = ? \
                     AND status NOT IN ('available', 'complete', 'failed', 'cancelled') AND {owned}",
                    unknown_status_message(self.backend)
                ),
                vec![p.id.clone().into(), p.id.clone().into(), me.into()],
            )
            .await?;
        Ok(n + m)
    }
}

/// `last_error` for an item with a status Feed does not know, naming it.
fn unknown_status_message(backend: DbBackend) -> String {
    concat(
        backend,
        &[
            "'unknown status '''",
            "status",
            "'''; use available, complete, failed or cancelled, then run `processor retry`'",
        ],
    )
}
