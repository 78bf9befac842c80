//! MySQL/MariaDB's result batch statements: it has no `UPDATE … FROM` and
//! no `RETURNING` on `UPDATE`, so a batch is one transaction (the store's,
//! `store::batches`) that locks the partition rows, then writes every row
//! in one `UPDATE` (single-table when the results are all alike, else
//! `UPDATE … JOIN`), and is rewritten row by row when it changed fewer
//! rows than it was sent.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::{Statement, Value};

use super::super::results::{RESULT_ROW, bucket, padded, padded_values, set_clause};
use super::super::{Clocked, Driver, Sql};
use crate::ids::PartitionId;
use crate::store::{Ack, ms};

/// The statement that locks the partitions of `acks` (`LOCK IN SHARE
/// MODE`), run first in a batch's transaction so that the fence holds at
/// commit whatever the isolation level.
pub(crate) fn share_lock(acks: &[Ack]) -> Statement {
    let partitions: Vec<PartitionId> = acks
        .iter()
        .map(|a| a.fence.partition_id.clone())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut lock = Sql::new(Driver::MySql);
    lock.push("SELECT id FROM feed_partitions WHERE id IN (")
        .binds(partitions.into_iter().map(Value::from))
        .push(") LOCK IN SHARE MODE");
    lock.statement()
}

/// The whole batch in one `UPDATE` with the per-row fence: single-table
/// when the results are all alike, else joined to its rows. None for a
/// batch of one.
pub(crate) fn batch(d: Clocked, acks: &[Ack], expiry: Duration) -> Option<Statement> {
    (acks.len() > 1).then(|| {
        uniform_statement(d, acks, expiry).unwrap_or_else(|| join_statement(d, acks, expiry))
    })
}

/// A mixed batch: a multi-table `UPDATE` joined to its rows, each a
/// `SELECT ? AS id, …` of [`RESULT_ROW`], the rows `UNION ALL`.
fn join_statement(d: Clocked, acks: &[Ack], expiry: Duration) -> Statement {
    let mut s = Sql::new(d);
    s.push("UPDATE feed_items i JOIN (");
    let mut values = padded_values(acks).into_iter();
    for r in 0..bucket(acks.len()) {
        s.push(if r == 0 {
            "SELECT "
        } else {
            " UNION ALL SELECT "
        });
        for (k, (c, _)) in RESULT_ROW.iter().enumerate() {
            if k > 0 {
                s.push(", ");
            }
            s.bind(values.next().unwrap_or(Value::Int(None)))
                .push(&format!(" AS {c}"));
        }
    }
    s.push(
        ") v ON i.partition_id = v.partition_id AND i.id = v.id \
         JOIN feed_partitions p ON p.id = v.partition_id JOIN feed_processors s ON s.id = p.owner \
         SET i.status = v.status, i.gate = v.gate, i.data = COALESCE(v.data, i.data), \
         i.not_before = {now} + v.delay, \
         i.attempts = v.attempts, i.steps = v.steps, i.last_error = v.last_error, i.version = i.version + v.bump, \
         i.updated_at = {now} \
         WHERE i.version = v.old_version AND i.attempts = v.old_attempts \
         AND p.owner = v.session AND s.heartbeat_at >= {now} - ",
    )
    .bind(ms(expiry));
    s.statement()
}

/// A batch whose results are all the same write from one session (a
/// drain's usual batch: every item answered `{"done": true}`): one
/// single-table `UPDATE` that finds its rows by their key `(partition_id,
/// id)` (a range read of the primary key) and fences each on its `(id,
/// version, attempts)` as delivered and on its partition being held by the
/// live session. The multi-table `UPDATE` of [`join_statement`] buffers its
/// rows in an on-disk temporary table; this one does not, and costs about
/// a quarter less per row. The fence is a second row `IN` of three values:
/// as one row `IN` of all four, MariaDB read the list eight times slower.
/// None when the batch is mixed or two of its items share an id (in
/// different partitions: one's fence could pass the other's row).
fn uniform_statement(d: Clocked, acks: &[Ack], expiry: Duration) -> Option<Statement> {
    let first = acks.first()?;
    if acks
        .iter()
        .any(|a| a.write != first.write || a.session != first.session)
    {
        return None;
    }
    let ids: HashSet<&str> = acks.iter().map(|a| a.fence.id.as_str()).collect();
    if ids.len() < acks.len() {
        return None;
    }
    let n = bucket(acks.len());
    let mut s = Sql::new(d);
    s.push("UPDATE feed_items SET ");
    set_clause(&mut s, &first.write);
    s.push(" WHERE (partition_id, id) IN (")
        .rows(
            n,
            padded(acks, |a| {
                let f = &a.fence;
                [f.partition_id.clone().into(), f.id.clone().into()]
            }),
        )
        .push(") AND (id, version, attempts) IN (")
        .rows(
            n,
            padded(acks, |a| {
                let f = &a.fence;
                [f.id.clone().into(), f.version.into(), f.attempts.into()]
            }),
        )
        .push(
            ") AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = feed_items.partition_id AND p.owner = ",
        )
        .bind(first.session.clone())
        .push(" AND s.heartbeat_at >= {now} - ")
        .bind(ms(expiry))
        .push(")");
    Some(s.statement())
}
