//! The fenced result statements every driver shares (one result in a
//! plain `UPDATE`, the row of a batch), and the batch statement of
//! PostgreSQL and SQLite: `UPDATE … FROM (VALUES …) RETURNING` (from the
//! driver's `VALUES` source); MySQL's is in its driver. The store runs
//! them (`store::batches`).

use std::time::Duration;

use sea_orm::{Statement, Value};

use super::{Clocked, Driver, Sql, postgres, sqlite};
use crate::store::{Ack, ItemWrite, ms};

/// The row of a result batch, defined once: each column's name and its SQL
/// type (PostgreSQL's parameters carry none, so its `VALUES` are cast).
/// Every batch statement is built from this list, and [`row_values`] gives
/// the values in its order.
pub(super) const RESULT_ROW: [(&str, &str); 13] = [
    ("id", "text"),
    ("old_version", "bigint"),
    ("old_attempts", "int"),
    ("partition_id", "text"),
    ("session", "text"),
    ("status", "text"),
    ("gate", "bigint"),
    ("data", "bytea"),
    ("delay", "bigint"),
    ("attempts", "int"),
    ("steps", "int"),
    ("last_error", "text"),
    ("bump", "int"),
];

/// Columns in [`RESULT_ROW`].
const RESULT_COLUMNS: usize = RESULT_ROW.len();

/// Appends the `VALUES` source of a result batch of `rows` rows (the
/// values in [`RESULT_ROW`]'s order, row after row) named `v`; returns
/// the columns `RETURNING` names the partition and the id by.
pub(super) type ValuesSource = fn(&mut Sql, usize, Vec<Value>) -> &'static str;

impl Clocked {
    /// PostgreSQL and SQLite: every result of the batch in one fenced
    /// `UPDATE … FROM (VALUES …) RETURNING partition_id, id` (one round
    /// trip); the items it returns passed the fence. Built anew for each attempt: a
    /// result's data may be megabytes, and each copy counts. With
    /// `partition`, every result is of that partition, and the statement
    /// says so.
    pub(crate) fn result_batch(
        self,
        acks: &[Ack],
        partition: Option<&str>,
        expiry: Duration,
    ) -> Statement {
        let source: ValuesSource = match *self {
            Driver::Postgres | Driver::Citus => postgres::values_source,
            _ => sqlite::values_source,
        };
        let mut s = Sql::new(self);
        s.push(
            "UPDATE feed_items AS i SET status = v.status, gate = v.gate, data = COALESCE(v.data, i.data), \
             not_before = {now} + v.delay, \
             attempts = v.attempts, steps = v.steps, last_error = v.last_error, version = i.version + v.bump, updated_at = {now} \
             FROM ",
        );
        let returning = source(&mut s, bucket(acks.len()), padded_values(acks));
        s.push(
            " WHERE i.id = v.id AND i.partition_id = v.partition_id \
             AND i.version = v.old_version AND i.attempts = v.old_attempts",
        );
        // Citus runs a statement on one worker, and locks there, only when
        // the partition is given as a value, not read from the list.
        if let Some(p) = partition {
            s.push(" AND i.partition_id = ").bind(p);
        }
        s.push(
            " AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = ",
        );
        match partition {
            Some(p) => s.bind(p),
            None => s.push("v.partition_id"),
        };
        s.push(" AND p.owner = v.session AND s.heartbeat_at >= {now} - ")
            .bind(ms(expiry))
            .push(self.dialect().fence_lock)
            .push(")");
        s.push(" RETURNING ").push(returning);
        s.statement()
    }
}

/// One fenced UPDATE: it changes the row only if the item's partition,
/// version and attempts are as delivered and that partition is owned by
/// the ack's live session (database clock).
pub(crate) fn result_statement(d: Clocked, ack: &Ack, expiry: Duration) -> Statement {
    let f = &ack.fence;
    let mut s = Sql::new(d);
    s.push("UPDATE feed_items SET ");
    set_clause(&mut s, &ack.write);
    s.push(" WHERE id = ")
        .bind(f.id.clone())
        .push(" AND partition_id = ")
        .bind(f.partition_id.clone())
        .push(" AND version = ")
        .bind(f.version)
        .push(" AND attempts = ")
        .bind(f.attempts)
        .push(
            " AND EXISTS (SELECT 1 FROM feed_partitions p \
             JOIN feed_processors s ON s.id = p.owner WHERE p.id = ",
        )
        .bind(f.partition_id.clone())
        .push(" AND p.owner = ")
        .bind(ack.session.clone())
        .push(" AND s.heartbeat_at >= {now} - ")
        .bind(ms(expiry))
        .push(d.dialect().fence_lock)
        .push(")");
    s.statement()
}

/// Appends the `SET` list that writes `w` to each row an update matches.
pub(super) fn set_clause(s: &mut Sql, w: &ItemWrite) {
    s.push("status = ")
        .bind(w.status.as_str())
        .push(", gate = ")
        .bind(w.gate)
        .push(", ");
    if let Some(d) = &w.data {
        s.push("data = ").bind(d.to_vec()).push(", ");
    }
    s.push("not_before = ");
    match w.delay {
        Some(d) => s.push("{now} + ").bind(ms(d)),
        None => s.push("NULL"),
    };
    let bump = i32::from(w.new_step);
    s.push(", attempts = ")
        .bind(w.attempts)
        .push(", steps = ")
        .bind(w.steps)
        .push(", last_error = ")
        .bind(w.last_error.clone())
        .push(&format!(
            ", version = version + {bump}, updated_at = {{now}}"
        ));
}

/// The values of a batch's rows, padded to its size class with rows that
/// match nothing (a NULL id never matches an item).
pub(super) fn padded_values(acks: &[Ack]) -> Vec<Value> {
    padded(acks, row_values)
}

/// `row(a)` for every ack, then rows of NULLs of the same types up to the
/// batch's size class ([`bucket`]).
pub(super) fn padded<const K: usize>(acks: &[Ack], row: impl Fn(&Ack) -> [Value; K]) -> Vec<Value> {
    let mut values: Vec<Value> = Vec::with_capacity(bucket(acks.len()) * K + 1);
    for a in acks {
        values.extend(row(a));
    }
    let padding: Vec<Value> = values.iter().take(K).map(Value::as_null).collect();
    for _ in acks.len()..bucket(acks.len()) {
        values.extend(padding.iter().cloned());
    }
    values
}

/// One result as the values of a batch row, in [`RESULT_ROW`]'s order.
fn row_values(a: &Ack) -> [Value; RESULT_COLUMNS] {
    let (f, w) = (&a.fence, &a.write);
    [
        f.id.clone().into(),
        f.version.into(),
        f.attempts.into(),
        f.partition_id.clone().into(),
        a.session.clone().into(),
        w.status.as_str().into(),
        w.gate.into(),
        w.data.as_deref().map(<[u8]>::to_vec).into(),
        w.delay.map(ms).into(),
        w.attempts.into(),
        w.steps.into(),
        w.last_error.clone().into(),
        i32::from(w.new_step).into(),
    ]
}

/// Batch statements come in a few sizes only (powers of two, padded with
/// rows that match nothing) so that prepared statements are reused instead
/// of parsed anew for every batch size.
pub(super) fn bucket(n: usize) -> usize {
    n.next_power_of_two()
}
