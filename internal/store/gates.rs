//! Gate-check queries: reading held partitions and their unfinished items,
//! advancing, closing and failing partitions.

use sea_orm::{DbBackend, FromQueryResult, Value};

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

/// What one held partition's items call for at its gate, learned from a
/// few index probes on `feed_items_ready` (each reads at most one entry),
/// so a check costs the same for a partition of ten items as for one of a
/// million. The probes run in order and stop at the first that answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GateProbe {
    /// An item is available at the partition's gate.
    Waiting,
    /// An item is available below the gate (it could never run), or an
    /// item has a status Feed does not know (written by hand).
    Unrunnable,
    /// A failed item blocks fan-in (`on_failure = block`).
    Blocked,
    /// The lowest later gate with available items, or None: nothing is left.
    Next(Option<i64>),
}

/// The probe as stored in one row: a verdict word and the next gate.
#[derive(FromQueryResult)]
struct ProbeRow {
    verdict: String,
    next_gate: Option<i64>,
}

impl From<ProbeRow> for GateProbe {
    fn from(r: ProbeRow) -> Self {
        match r.verdict.as_str() {
            "waiting" => GateProbe::Waiting,
            "unrunnable" => GateProbe::Unrunnable,
            "blocked" => GateProbe::Blocked,
            _ => GateProbe::Next(r.next_gate),
        }
    }
}

/// The statuses Feed writes, in sorting order: any other status lies in one
/// of the open ranges between them, so "an unknown status" is five range
/// probes on the index rather than a scan of the partition's items.
const KNOWN: [&str; 4] = ["available", "cancelled", "complete", "failed"];

/// SQL for an item of partition `p` whose status matches `cond`.
fn item_exists(cond: &str) -> String {
    format!("EXISTS (SELECT 1 FROM feed_items r WHERE r.partition_id = p.id AND {cond})")
}

/// The probe's `verdict` and `next_gate` columns for a partition aliased `p`.
fn probe_columns() -> String {
    let mut unknown = vec![
        item_exists(&format!("r.status < '{}'", KNOWN[0])),
        item_exists(&format!("r.status > '{}'", KNOWN[KNOWN.len() - 1])),
    ];
    for w in KNOWN.windows(2) {
        unknown.push(item_exists(&format!(
            "r.status > '{}' AND r.status < '{}'",
            w[0], w[1]
        )));
    }
    let waiting = item_exists("r.status = 'available' AND r.gate = p.gate");
    format!(
        "CASE WHEN {waiting} THEN 'waiting' \
         WHEN {below} OR {unknown} THEN 'unrunnable' \
         WHEN p.on_failure <> 'continue' AND {failed} THEN 'blocked' \
         ELSE 'next' END AS verdict, \
         CASE WHEN {waiting} THEN NULL ELSE (SELECT MIN(r.gate) FROM feed_items r \
         WHERE r.partition_id = p.id AND r.status = 'available' AND r.gate > p.gate) END AS next_gate",
        below = item_exists("r.status = 'available' AND r.gate < p.gate"),
        unknown = unknown.join(" OR "),
        failed = item_exists("r.status = 'failed'"),
    )
}

impl Store {
    /// The held partitions among `ids`, each with what its items call
    /// for, for a gate check: one statement, a few index probes each.
    pub(crate) async fn partitions_for_check(
        &self,
        me: &str,
        ids: &[String],
    ) -> Result<Vec<(HeldPartition, GateProbe)>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!(
            "SELECT p.id, p.gate, p.version, p.auto_close, p.manual_checkpoint, p.on_failure, {} \
             FROM feed_partitions p WHERE p.owner = ? AND p.status = 'available' AND p.id IN ({})",
            probe_columns(),
            marks(ids.len().next_power_of_two())
        );
        // Padded with NULLs (which match nothing) to a power of two, so the
        // statement is prepared and planned once per size class.
        let mut values: Vec<Value> = vec![me.into()];
        values.extend(ids.iter().map(|i| Value::from(i.clone())));
        values.resize(ids.len().next_power_of_two() + 1, Value::String(None));
        let rows = self.query(&sql, values).await?;
        rows.iter()
            .map(|r| {
                Ok((
                    HeldPartitionRow::from_query_result(r, "")?.into(),
                    ProbeRow::from_query_result(r, "")?.into(),
                ))
            })
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
