//! Gate-check queries: reading held partitions and their unfinished items,
//! advancing, closing and failing partitions.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult, Value};

use super::driver::{Driver, Sql, sql};
use super::outbox::Happened;
use super::probes::{item_exists, no_open_items, verdict_column};
use super::{Store, get};
use crate::Result;
use crate::ids::{PartitionId, SessionId};
use crate::status::Status;

/// A partition this processor holds, as read for a gate check.
#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct HeldPartition {
    /// Partition id.
    pub id: PartitionId,
    /// Current gate.
    pub gate: i64,
    /// OCC version.
    pub version: i64,
    /// Close when nothing is left.
    pub auto_close: bool,
    /// Never advance the gate automatically.
    pub manual_checkpoint: bool,
}

/// What one held partition's items call for at its gate, learned from a
/// few index probes on `feed_items_ready` (each reads at most one entry),
/// so a check costs the same for a partition of ten items as for one of a
/// million. The probes run in order and stop at the first that answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GateProbe {
    /// An item is available at the partition's gate and may run now.
    Waiting,
    /// Items are available at the gate, but none may run now (the
    /// partition is paused, or they wait out a backoff or their scheduled
    /// time): with the milliseconds until the first of them comes due,
    /// unless paused. The dispatch loop wakes the partition then; the
    /// acquire cycle's sweep finds it too.
    Idle(Option<i64>),
    /// An item is available below the gate (it could never run), or an
    /// item has a status Feed does not know (written by hand).
    Unrunnable,
    /// A failed item blocks fan-in (`on_failure = block`).
    Blocked,
    /// The lowest later gate with available items, or None: nothing is left.
    Next(Option<i64>),
}

/// Partitions closed per statement at most.
const CLOSE_CHUNK: usize = 500;

/// The probe's verdict as stored: a word.
#[derive(FromQueryResult)]
struct ProbeRow {
    verdict: String,
}

/// `ids` padded with NULLs (which match nothing) to a power of two, so a
/// statement is prepared and planned once per size class.
fn padded_ids(ids: &[PartitionId]) -> Vec<Value> {
    let n = ids.len().next_power_of_two();
    let mut values: Vec<Value> = ids.iter().map(|i| Value::from(i.clone())).collect();
    values.resize(n, Value::String(None));
    values
}

impl Store {
    /// The held partitions among `ids`, each with what its items call
    /// for, for a gate check: one statement (on Citus one per partition),
    /// a few index probes each, and one more for the partitions whose next
    /// gate must be found.
    pub(crate) async fn partitions_for_check(
        &self,
        me: &SessionId,
        ids: &[PartitionId],
    ) -> Result<Vec<(HeldPartition, GateProbe)>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        self.per_partition(ids, |some| self.check_in(me, some))
            .await
    }

    /// A gate check's reads of the partitions `ids`.
    async fn check_in(
        &self,
        me: &SessionId,
        ids: &[PartitionId],
    ) -> Result<Vec<(HeldPartition, GateProbe)>> {
        // An idle partition that is not paused waits for its first
        // scheduled item: one entry of the ready index says when.
        let index = self.driver.dialect().ready_index;
        let mut s = Sql::new(self.driver);
        let key = self.one_partition(&mut s, ids);
        let (v_id, p_id) = key.as_deref().map_or(("v.id", "p.id"), |k| (k, k));
        s.push(&format!(
            "SELECT v.*, CASE WHEN v.verdict = 'idle' AND NOT v.paused THEN \
             (SELECT r.not_before FROM feed_items r{index} WHERE r.partition_id = {v_id} \
             AND r.status = 'available' AND r.gate = v.gate AND r.not_before IS NOT NULL \
             ORDER BY r.not_before LIMIT 1) - {{now}} END AS due_in \
             FROM (SELECT p.id, p.gate, p.version, p.auto_close, p.manual_checkpoint, p.paused, "
        ));
        verdict_column(&mut s, me, p_id);
        s.push(" FROM feed_partitions p WHERE p.id IN (")
            .binds(padded_ids(ids))
            .push(")) v");
        let rows = self.fetch(s.statement()).await?;
        let mut out = Vec::with_capacity(rows.len());
        let mut later = Vec::new();
        for r in &rows {
            let p = HeldPartition::from_query_result(r, "")?;
            let probe = match ProbeRow::from_query_result(r, "")?.verdict.as_str() {
                "lost" => continue,
                "waiting" => GateProbe::Waiting,
                "idle" => GateProbe::Idle(get(r, "due_in")?),
                "unrunnable" => GateProbe::Unrunnable,
                "blocked" => GateProbe::Blocked,
                "done" => GateProbe::Next(None),
                _ => {
                    later.push(p.id.clone());
                    GateProbe::Next(None)
                }
            };
            out.push((p, probe));
        }
        if !later.is_empty() {
            let (next, unreadable) = self.next_gates(me, &later).await?;
            for (p, probe) in &mut out {
                if let Some(g) = next.get(&p.id) {
                    *probe = GateProbe::Next(*g);
                } else if unreadable.contains(&p.id) {
                    // Its bad items were failed: the next check sees why.
                    *probe = GateProbe::Unrunnable;
                }
            }
        }
        Ok(out)
    }

    /// The lowest gate above each partition's own with available items
    /// (None: nothing available is left), by one index probe each; and the
    /// partitions where that gate cannot be read (an item's gate written by
    /// hand that is not an integer), whose such items are failed.
    async fn next_gates(
        &self,
        me: &SessionId,
        ids: &[PartitionId],
    ) -> Result<(HashMap<PartitionId, Option<i64>>, Vec<PartitionId>)> {
        let index = self.driver.dialect().ready_index;
        let mut s = Sql::new(self.driver);
        let key = self.one_partition(&mut s, ids);
        let p_id = key.as_deref().unwrap_or("p.id");
        s.push(&format!(
            "SELECT p.id, (SELECT MIN(r.gate) FROM feed_items r{index} WHERE r.partition_id = {p_id} \
             AND r.status = 'available' AND r.gate > p.gate) AS next_gate \
             FROM feed_partitions p WHERE p.id IN ("
        ))
        .binds(padded_ids(ids))
        .push(")");
        let rows = self.fetch(s.statement()).await?;
        let (mut next, mut unreadable) = (HashMap::new(), Vec::new());
        for r in &rows {
            let id: PartitionId = get(r, "id")?;
            match get(r, "next_gate") {
                Ok(g) => {
                    next.insert(id, g);
                }
                Err(e) if self.driver == Driver::Sqlite => {
                    let n = self.fail_unreadable_gates(me, &id).await?;
                    tracing::warn!(partition = %id, items = n, error = %e, "items' gates cannot be read; they are failed: fix them with SQL and run `processor retry`");
                    unreadable.push(id);
                }
                Err(e) => return Err(e),
            }
        }
        Ok((next, unreadable))
    }

    /// Moves a held partition to `gate` (OCC, owner-fenced). The same
    /// statement re-checks that nothing available is left below the new
    /// gate, so an item made available meanwhile is never passed over. A
    /// partition with `gate_events` moves in a transaction that writes its
    /// event; one without, in that one statement.
    pub(crate) async fn advance_gate(
        &self,
        p: &HeldPartition,
        me: &SessionId,
        gate: i64,
    ) -> Result<bool> {
        let advance = |events: &str| {
            sql!(self.driver;
                "UPDATE feed_partitions SET gate = " {gate} ", gate_at = {now}, version = version + 1, updated_at = {now} \
                 WHERE id = " {p.id.clone()} " AND version = " {p.version} " AND owner = " {me}
                " AND " [events] "gate_events AND NOT EXISTS (SELECT 1 FROM feed_items i \
                 WHERE i.partition_id = " {p.id.clone()} " AND i.status = 'available' AND i.gate < " {gate} ")"
            )
        };
        if self.run(advance("NOT ")).await? == 1 {
            return Ok(true);
        }
        let txn = self.begin_write().await?;
        let n = self
            .bounded(txn.execute_raw(advance("")))
            .await?
            .rows_affected();
        if n == 1 {
            let ids = std::slice::from_ref(&p.id);
            self.record_events(&txn, Happened::Gate, ids).await?;
        }
        self.bounded(self.commit(txn)).await?;
        Ok(n == 1)
    }

    /// Closes held partitions (`complete`) and releases them, each at the
    /// version it was read at and only while it has no available item
    /// (re-checked in the same statement); returns the ids closed. One
    /// statement per [`CLOSE_CHUNK`] partitions (on Citus per partition).
    pub(crate) async fn close_partitions(
        &self,
        parts: &[HeldPartition],
        me: &SessionId,
    ) -> Result<Vec<PartitionId>> {
        let parts: Vec<(PartitionId, i64)> =
            parts.iter().map(|p| (p.id.clone(), p.version)).collect();
        let guard = format!(
            "NOT {}",
            item_exists(*self.driver, "i.status = 'available'", "feed_partitions.id")
        );
        self.close_where(&parts, me, "version", &guard).await
    }

    /// Closes, without reading them first, the held partitions among
    /// `parts` (ids at the versions last seen) that close by themselves and
    /// whose every item is `complete` or `cancelled`: the common end of a
    /// small partition costs one statement shared with many others. The
    /// rest are left as they are, for a full check.
    pub(crate) async fn close_finished(
        &self,
        parts: &[(PartitionId, i64)],
        me: &SessionId,
    ) -> Result<Vec<PartitionId>> {
        // Status and auto_close are tested inside the version's test, so that
        // the rows can only be found by their ids (as in `lease_many`).
        let guard = no_open_items(*self.driver, "feed_partitions.id");
        self.close_where(
            parts,
            me,
            "CASE WHEN status = 'available' AND auto_close THEN version END",
            &guard,
        )
        .await
    }

    /// Closes and releases the partitions among `parts` still owned by `me`
    /// whose `version` (an expression) is theirs there and for which
    /// `guard` holds; returns the ids closed.
    async fn close_where(
        &self,
        parts: &[(PartitionId, i64)],
        me: &SessionId,
        version: &str,
        guard: &str,
    ) -> Result<Vec<PartitionId>> {
        self.per_partition(parts, |some| self.close_chunks(some, me, version, guard))
            .await
    }

    /// [`Store::close_where`] in transactions of [`CLOSE_CHUNK`] partitions.
    async fn close_chunks(
        &self,
        parts: &[(PartitionId, i64)],
        me: &SessionId,
        version: &str,
        guard: &str,
    ) -> Result<Vec<PartitionId>> {
        let mut closed = Vec::new();
        for chunk in parts.chunks(CLOSE_CHUNK) {
            // The closes and their events, in one transaction.
            let txn = self.begin_write().await?;
            let rows = self
                .returning_in(&txn, self.driver.close(chunk, me, version, guard))
                .await?;
            let ids = rows
                .iter()
                .map(|r| get(r, "id"))
                .collect::<Result<Vec<PartitionId>>>()?;
            let ended = Happened::Ended(Status::Complete);
            self.record_events(&txn, ended, &ids).await?;
            self.bounded(self.commit(txn)).await?;
            closed.extend(ids);
        }
        Ok(closed)
    }

    /// Fails a held partition (an item failed for good and blocks fan-in)
    /// and releases it (OCC, owner-fenced).
    pub(crate) async fn fail_partition(&self, p: &HeldPartition, me: &SessionId) -> Result<bool> {
        let txn = self.begin_write().await?;
        let n = self
            .bounded(txn.execute_raw(sql!(self.driver;
                "UPDATE feed_partitions SET status = 'failed', owner = NULL, version = version + 1, \
                 updated_at = {now} WHERE id = " {p.id.clone()} " AND version = " {p.version} " AND owner = " {me}
            )))
            .await?
            .rows_affected();
        if n == 1 {
            let ended = Happened::Ended(Status::Failed);
            self.record_events(&txn, ended, std::slice::from_ref(&p.id))
                .await?;
        }
        self.bounded(self.commit(txn)).await?;
        Ok(n == 1)
    }

    /// Fails items whose status Feed cannot act on in a held partition:
    /// available below the partition's gate (they could never run) or an
    /// unknown status. Each gets a `last_error` that says what to do.
    pub(crate) async fn fail_unrunnable(&self, p: &HeldPartition, me: &SessionId) -> Result<u64> {
        let below = format!(
            "item gate is below its partition's gate {}; it can never run. \
             Run `processor retry` to run it at the partition's gate",
            p.gate
        );
        let owned = "EXISTS (SELECT 1 FROM feed_partitions p WHERE p.id = ";
        let n = self
            .run(sql!(self.driver;
                "UPDATE feed_items SET status = 'failed', last_error = " {below} ", version = version + 1, \
                 updated_at = {now} WHERE partition_id = " {&p.id} " AND status = 'available' AND gate < "
                {p.gate} " AND " [owned] {&p.id} " AND p.owner = " {me} ")"
            ))
            .await?;
        let m = self
            .run(sql!(self.driver;
                "UPDATE feed_items SET last_error = " [&unknown_status_message(*self.driver)]
                ", status = 'failed', version = version + 1, updated_at = {now} WHERE partition_id = "
                {&p.id} " AND status NOT IN ('available', 'complete', 'failed', 'cancelled') AND "
                [owned] {&p.id} " AND p.owner = " {me} ")"
            ))
            .await?;
        Ok(n + m)
    }
}

/// `last_error` for an item with a status Feed does not know, naming it.
fn unknown_status_message(driver: Driver) -> String {
    driver.concat(&[
        "'unknown status '''",
        "status",
        "'''; use available, complete, failed or cancelled, then run `processor retry`'",
    ])
}
