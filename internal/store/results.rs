//! Writing handler results: fenced, many per statement (PostgreSQL, SQLite)
//! or per transaction (MySQL/MariaDB), with a row the database refuses
//! isolated from the rest of its batch.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbErr, Statement, Value};

use super::driver::{ResultBatch, ValuesSource, marks, value_rows};
use super::{Fence, Store, ms};
use crate::ids::{PartitionId, SessionId};
use crate::status::Status;
use crate::{Error, Result};

/// Rows per batched UPDATE ([`RESULT_COLUMNS`] parameters each: well under
/// every backend's limit).
const BATCH_ROWS: usize = 256;

/// The row of a result batch, defined once: each column's name and its SQL
/// type (PostgreSQL's parameters carry none, so its `VALUES` are cast).
/// Every batch statement is built from this list, and [`row_values`] gives
/// the values in its order.
const RESULT_ROW: [(&str, &str); 12] = [
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
    ("last_error", "text"),
    ("bump", "int"),
];

/// Columns in [`RESULT_ROW`].
const RESULT_COLUMNS: usize = RESULT_ROW.len();

/// Longest `last_error` stored, in bytes; longer messages are cut and say so.
pub const MAX_ERROR_BYTES: usize = 8192;

/// The new state of an item after a handler call, written under the fence.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemWrite {
    /// New status.
    pub status: Status,
    /// Next gate.
    pub gate: i64,
    /// New data; None keeps the stored bytes.
    pub data: Option<bytes::Bytes>,
    /// Calls made for the current step.
    pub attempts: i32,
    /// Why the last call failed, if it did (see [`sanitize_error`]).
    pub last_error: Option<String>,
    /// Retry delay from now (database clock); None = may run at once.
    pub delay: Option<Duration>,
    /// A new step (or a final state) bumps `version`; a failed attempt does
    /// not, so the `Idempotency-Key` (id + version) is stable across retries
    /// of one step. Every write changes `version` or `attempts`, and both are
    /// checked, so a stale writer can never overwrite a newer result.
    pub new_step: bool,
}

/// One result to write: the fence of the delivered item, the session that
/// delivered it, and the item's new state.
#[derive(Clone, Debug)]
pub struct Ack {
    /// The item as delivered.
    pub fence: Fence,
    /// The session that held the partition when the item was delivered.
    pub session: SessionId,
    /// The new state.
    pub write: ItemWrite,
}

/// What became of one result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Stored.
    Yes,
    /// Rejected by the fence: the item changed or its partition moved.
    Stale,
    /// The database refused this row (its text says why); nothing was stored.
    Refused(String),
}

/// A message fit for `last_error`: NUL characters (which PostgreSQL
/// refuses in text) replaced, and cut at [`MAX_ERROR_BYTES`] with a note.
pub fn sanitize_error(message: &str) -> String {
    let clean = message.replace('\0', "\u{FFFD}");
    if clean.len() <= MAX_ERROR_BYTES {
        return clean;
    }
    let mut end = MAX_ERROR_BYTES - 64;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} … [cut: {} bytes in all]", &clean[..end], clean.len())
}

/// Whether the database itself refused a statement (a constraint, a value
/// it cannot store), as opposed to failing to run it (connection, timeout,
/// a conflict to retry, a connection on a server that cannot write): only
/// a refusal may become a failed attempt; the rest is the database's fault.
fn refused(e: &Error) -> bool {
    match e {
        Error::Db(d @ DbErr::Exec(sea_orm::RuntimeErr::SqlxError(s)))
        | Error::Db(d @ DbErr::Query(sea_orm::RuntimeErr::SqlxError(s))) => {
            s.as_database_error().is_some() && !super::is_transient(d)
        }
        _ => false,
    }
}

impl Store {
    /// Writes many results, each with its own fence; per result, whether it
    /// was stored. When the database refuses a batch, its rows are written
    /// one by one so that one bad row costs only itself. Errors that are
    /// not the database's refusal (the connection, after retries) fail the
    /// whole call.
    pub(crate) async fn write_results(
        &self,
        acks: &[Ack],
        expiry: Duration,
    ) -> Result<Vec<Written>> {
        let mut out = Vec::with_capacity(acks.len());
        for chunk in acks.chunks(BATCH_ROWS) {
            match self.write_chunk(chunk, expiry).await {
                Ok(written) => out.extend(written.into_iter().map(Written::from)),
                Err(e) if refused(&e) && chunk.len() > 1 => {
                    tracing::warn!(error = %e, rows = chunk.len(), "the database refused a batch of results; writing them one by one");
                    for ack in chunk {
                        out.push(
                            match self.write_chunk(std::slice::from_ref(ack), expiry).await {
                                Ok(w) => Written::from(w[0]),
                                Err(e) if refused(&e) => {
                                    Written::Refused(sanitize_error(&e.to_string()))
                                }
                                Err(e) => return Err(e),
                            },
                        );
                    }
                }
                Err(e) if refused(&e) => out.push(Written::Refused(sanitize_error(&e.to_string()))),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn write_chunk(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        match (self.driver.result_batch(), acks) {
            (ResultBatch::Join, _) => self.write_mysql(acks, expiry).await,
            (ResultBatch::Values(_), [one]) => self.write_one(one, expiry).await,
            (ResultBatch::Values(source), _) => self.write_batch(acks, expiry, source).await,
        }
    }

    /// PostgreSQL and SQLite: one result in a plain fenced `UPDATE`. A
    /// lone result needs no VALUES list, which SQLite copies into a table
    /// of its own before it updates (costly for megabytes of data).
    async fn write_one(&self, ack: &Ack, expiry: Duration) -> Result<Vec<bool>> {
        let n = self
            .retry(|| async {
                self.count(1);
                self.execute_raw(self.result_statement(ack, expiry)).await
            })
            .await?;
        Ok(vec![n.rows_affected() == 1])
    }

    /// PostgreSQL and SQLite: every result of the batch in one fenced
    /// `UPDATE … FROM (VALUES …) RETURNING id` (one round trip). RETURNING
    /// says which rows passed the fence.
    async fn write_batch(
        &self,
        acks: &[Ack],
        expiry: Duration,
        source: ValuesSource,
    ) -> Result<Vec<bool>> {
        let (source, returning) = source(bucket(acks.len()), &RESULT_ROW);
        let sql = format!(
            "UPDATE feed_items AS i SET status = v.status, gate = v.gate, data = COALESCE(v.data, i.data), \
             not_before = CASE WHEN v.delay IS NULL THEN NULL ELSE {{now}} + v.delay END, \
             attempts = v.attempts, last_error = v.last_error, version = i.version + v.bump, updated_at = {{now}} \
             FROM {source} \
             WHERE i.id = v.id AND i.partition_id = v.partition_id \
             AND i.version = v.old_version AND i.attempts = v.old_attempts \
             AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = v.partition_id AND p.owner = v.session AND s.heartbeat_at >= {{now}} - ?{lock}) \
             RETURNING {returning}",
            lock = self.driver.fence_lock()
        );
        // The values are built per attempt, not cloned from a kept copy:
        // a result's data may be megabytes, and each copy counts.
        let rows = self
            .retry(|| async {
                self.count(1);
                let mut values = padded_values(acks);
                values.push(ms(expiry).into());
                self.query_all_raw(self.driver.stmt(&sql, values)).await
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

    /// MySQL/MariaDB (no UPDATE … RETURNING), in one transaction: lock the
    /// partition rows first (`LOCK IN SHARE MODE`), so the fence holds at
    /// commit whatever the isolation level; then the whole batch in one
    /// multi-table UPDATE with the per-row fence. When some rows were
    /// rejected the batch is rolled back and the rows are written one by
    /// one to learn which (rejections are rare: a lease change mid-call).
    async fn write_mysql(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        let partitions: Vec<PartitionId> = acks
            .iter()
            .map(|a| a.fence.partition_id.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let lock = self.driver.stmt(
            &format!(
                "SELECT id FROM feed_partitions WHERE id IN ({}) LOCK IN SHARE MODE",
                marks(partitions.len())
            ),
            partitions.into_iter().map(Value::from).collect(),
        );
        let batch = (acks.len() > 1).then(|| {
            self.mysql_uniform_statement(acks, expiry)
                .unwrap_or_else(|| self.mysql_batch_statement(acks, expiry))
        });
        if let Some(batch) = &batch {
            let n = acks.len() as u64;
            let all = self
                .retry(|| async {
                    let txn = self.begin_immediate().await?;
                    self.count(2);
                    txn.query_all_raw(lock.clone()).await?;
                    if txn.execute_raw(batch.clone()).await?.rows_affected() == n {
                        self.commit(txn).await?;
                        Ok(true)
                    } else {
                        txn.rollback().await?;
                        Ok(false)
                    }
                })
                .await?;
            if all {
                return Ok(vec![true; acks.len()]);
            }
        }
        let each: Vec<Statement> = acks
            .iter()
            .map(|a| self.result_statement(a, expiry))
            .collect();
        self.retry(|| async {
            let txn = self.begin_immediate().await?;
            self.count(1);
            txn.query_all_raw(lock.clone()).await?;
            let mut out = Vec::with_capacity(each.len());
            for st in &each {
                self.count(1);
                out.push(txn.execute_raw(st.clone()).await?.rows_affected() == 1);
            }
            self.commit(txn).await?;
            Ok(out)
        })
        .await
    }

    fn mysql_batch_statement(&self, acks: &[Ack], expiry: Duration) -> Statement {
        let named: Vec<String> = RESULT_ROW
            .iter()
            .map(|(c, _)| format!("? AS {c}"))
            .collect();
        let row = format!("SELECT {}", named.join(", "));
        let mut values = padded_values(acks);
        values.push(ms(expiry).into());
        let rows = vec![row.as_str(); bucket(acks.len())].join(" UNION ALL ");
        let sql = format!(
            "UPDATE feed_items i JOIN ({rows}) v ON i.id = v.id \
             JOIN feed_partitions p ON p.id = v.partition_id JOIN feed_processors s ON s.id = p.owner \
             SET i.status = v.status, i.gate = v.gate, i.data = COALESCE(v.data, i.data), \
             i.not_before = CASE WHEN v.delay IS NULL THEN NULL ELSE {{now}} + v.delay END, \
             i.attempts = v.attempts, i.last_error = v.last_error, i.version = i.version + v.bump, \
             i.updated_at = {{now}} \
             WHERE i.partition_id = v.partition_id AND i.version = v.old_version AND i.attempts = v.old_attempts \
             AND p.owner = v.session AND s.heartbeat_at >= {{now}} - ?"
        );
        self.driver.stmt(&sql, values)
    }

    /// One fenced UPDATE: it changes the row only if the item's partition,
    /// version and attempts are as delivered and that partition is owned by
    /// the ack's live session (database clock).
    fn result_statement(&self, ack: &Ack, expiry: Duration) -> Statement {
        let f = &ack.fence;
        let (set, mut values) = set_clause(&ack.write);
        values.extend([
            f.id.clone().into(),
            f.partition_id.clone().into(),
            f.version.into(),
            f.attempts.into(),
            f.partition_id.clone().into(),
            ack.session.clone().into(),
            ms(expiry).into(),
        ]);
        let sql = format!(
            "UPDATE feed_items SET {set} \
             WHERE id = ? AND partition_id = ? AND version = ? AND attempts = ? AND EXISTS (SELECT 1 FROM feed_partitions p \
             JOIN feed_processors s ON s.id = p.owner WHERE p.id = ? AND p.owner = ? \
             AND s.heartbeat_at >= {{now}} - ?{lock})",
            lock = self.driver.fence_lock()
        );
        self.driver.stmt(&sql, values)
    }

    /// MySQL/MariaDB, a batch whose results are all the same write from
    /// one session (a drain's usual batch: every item answered
    /// `{"done": true}`): one single-table `UPDATE` that finds its rows by
    /// key and fences each on its `(id, version, attempts)` and partition
    /// as delivered and on that partition being held by the live session.
    /// The multi-table `UPDATE` of [`Store::mysql_batch_statement`] buffers
    /// its rows in an on-disk temporary table; this one does not, and
    /// costs about a quarter less per row. The partition is tested with a
    /// `CASE` on the id: as a fourth value of the row `IN`, MariaDB read
    /// the list eight times slower. None when the batch is mixed.
    fn mysql_uniform_statement(&self, acks: &[Ack], expiry: Duration) -> Option<Statement> {
        let first = acks.first()?;
        if acks
            .iter()
            .any(|a| a.write != first.write || a.session != first.session)
        {
            return None;
        }
        let n = bucket(acks.len());
        let (set, mut values) = set_clause(&first.write);
        values.extend(padded(acks, |a| [a.fence.id.clone().into()]));
        values.extend(padded(acks, |a| {
            let f = &a.fence;
            [f.id.clone().into(), f.version.into(), f.attempts.into()]
        }));
        values.extend(padded(acks, |a| {
            let f = &a.fence;
            [f.id.clone().into(), f.partition_id.clone().into()]
        }));
        values.extend([first.session.clone().into(), ms(expiry).into()]);
        let sql = format!(
            "UPDATE feed_items SET {set} \
             WHERE id IN ({}) AND (id, version, attempts) IN ({}) \
             AND partition_id = CASE id {} END AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = feed_items.partition_id AND p.owner = ? AND s.heartbeat_at >= {{now}} - ?)",
            marks(n),
            value_rows(n, 3),
            vec!["WHEN ? THEN ?"; n].join(" ")
        );
        Some(self.driver.stmt(&sql, values))
    }
}

/// The `SET` list that writes `w` to each row an update matches, and its
/// values in order.
fn set_clause(w: &ItemWrite) -> (String, Vec<Value>) {
    let mut values: Vec<Value> = vec![w.status.as_str().into(), w.gate.into()];
    let data_set = if let Some(d) = &w.data {
        values.push(d.to_vec().into());
        "data = ?, "
    } else {
        ""
    };
    let not_before = match w.delay {
        Some(d) => {
            values.push(ms(d).into());
            "{now} + ?"
        }
        None => "NULL",
    };
    values.extend([w.attempts.into(), w.last_error.clone().into()]);
    let bump = i32::from(w.new_step);
    let set = format!(
        "status = ?, gate = ?, {data_set}not_before = {not_before}, \
         attempts = ?, last_error = ?, version = version + {bump}, updated_at = {{now}}"
    );
    (set, values)
}

impl From<bool> for Written {
    fn from(stored: bool) -> Self {
        if stored { Written::Yes } else { Written::Stale }
    }
}

/// The values of a batch's rows, padded to its size class with rows that
/// match nothing (a NULL id never matches an item).
fn padded_values(acks: &[Ack]) -> Vec<Value> {
    padded(acks, row_values)
}

/// `row(a)` for every ack, then rows of NULLs of the same types up to the
/// batch's size class ([`bucket`]).
fn padded<const K: usize>(acks: &[Ack], row: impl Fn(&Ack) -> [Value; K]) -> Vec<Value> {
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
        w.last_error.clone().into(),
        i32::from(w.new_step).into(),
    ]
}

/// Batch statements come in a few sizes only (powers of two, padded with
/// rows that match nothing) so that prepared statements are reused instead
/// of parsed anew for every batch size.
pub(crate) fn bucket(n: usize) -> usize {
    n.next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_made_storable() {
        assert_eq!(sanitize_error("a\0b"), "a\u{FFFD}b");
        let long = "é".repeat(10_000);
        let cut = sanitize_error(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES);
        assert!(cut.ends_with("[cut: 20000 bytes in all]"), "{cut}");
        assert_eq!(sanitize_error("short"), "short");
    }
}
