//! The fenced result statements every driver shares (one result in a
//! plain `UPDATE`, the row of a batch), and the batch each driver writes
//! its own way: `UPDATE … FROM (VALUES …) RETURNING` on PostgreSQL and
//! SQLite (from the driver's `VALUES` source), MySQL's in its driver.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::{Statement, Value};

use super::{Driver, Sql, mysql, postgres, sqlite};
use crate::Result;
use crate::store::{Ack, ItemWrite, Store, ms};

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
/// the column `RETURNING` names the id by.
pub(super) type ValuesSource = fn(&mut Sql, usize, Vec<Value>) -> &'static str;

impl Driver {
    /// Writes a chunk of results, each with its own fence; per result,
    /// whether it was stored.
    pub(crate) async fn write_results(
        self,
        store: &Store,
        acks: &[Ack],
        expiry: Duration,
    ) -> Result<Vec<bool>> {
        match (self, acks) {
            (Driver::MySql, _) => mysql::results::write(store, acks, expiry).await,
            (Driver::Sqlite | Driver::Postgres, [one]) => write_one(store, one, expiry).await,
            (Driver::Sqlite, _) => write_batch(store, acks, expiry, sqlite::values_source).await,
            (Driver::Postgres, _) => {
                write_batch(store, acks, expiry, postgres::values_source).await
            }
        }
    }
}

/// PostgreSQL and SQLite: one result in a plain fenced `UPDATE`. A lone
/// result needs no VALUES list, which SQLite copies into a table of its
/// own before it updates (costly for megabytes of data).
async fn write_one(store: &Store, ack: &Ack, expiry: Duration) -> Result<Vec<bool>> {
    let n = store
        .retry(|| async {
            store.count(1);
            store
                .execute_raw(result_statement(store.driver(), ack, expiry))
                .await
        })
        .await?;
    Ok(vec![n.rows_affected() == 1])
}

/// PostgreSQL and SQLite: every result of the batch in one fenced
/// `UPDATE … FROM (VALUES …) RETURNING id` (one round trip). RETURNING
/// says which rows passed the fence.
async fn write_batch(
    store: &Store,
    acks: &[Ack],
    expiry: Duration,
    source: ValuesSource,
) -> Result<Vec<bool>> {
    // The statement is built per attempt, not cloned from a kept copy: a
    // result's data may be megabytes, and each copy counts.
    let build = || {
        let mut s = Sql::new(store.driver());
        s.push(
            "UPDATE feed_items AS i SET status = v.status, gate = v.gate, data = COALESCE(v.data, i.data), \
             not_before = CASE WHEN v.delay IS NULL THEN NULL ELSE {now} + v.delay END, \
             attempts = v.attempts, steps = v.steps, last_error = v.last_error, version = i.version + v.bump, updated_at = {now} \
             FROM ",
        );
        let returning = source(&mut s, bucket(acks.len()), padded_values(acks));
        s.push(
            " WHERE i.id = v.id AND i.partition_id = v.partition_id \
             AND i.version = v.old_version AND i.attempts = v.old_attempts \
             AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = v.partition_id AND p.owner = v.session AND s.heartbeat_at >= {now} - ",
        )
        .bind(ms(expiry))
        .push(store.driver().dialect().fence_lock)
        .push(") RETURNING ")
        .push(returning);
        s.statement()
    };
    let rows = store
        .retry(|| async {
            store.count(1);
            store.query_all_raw(build()).await
        })
        .await?;
    let written: HashSet<String> = rows
        .iter()
        .filter_map(|r| r.try_get::<String>("", "id").ok())
        .collect();
    Ok(acks
        .iter()
        .map(|a| written.contains(a.fence.id.as_str()))
        .collect())
}

/// One fenced UPDATE: it changes the row only if the item's partition,
/// version and attempts are as delivered and that partition is owned by
/// the ack's live session (database clock).
pub(crate) fn result_statement(d: Driver, ack: &Ack, expiry: Duration) -> Statement {
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
