//! Writing handler results: fenced, many per statement (PostgreSQL, SQLite)
//! or per transaction (MySQL/MariaDB).

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait, Value};

use super::dialect::stmt;
use super::{ItemWrite, ReadyItem, Store, ms};
use crate::Result;

/// Rows per batched UPDATE (12 parameters each: well under every backend's limit).
const BATCH_ROWS: usize = 256;

/// One result to write: the item as it was delivered, the session that
/// delivered it, and its new state.
#[derive(Clone, Debug)]
pub struct Ack {
    /// The item as fetched (its version and attempts are the fence).
    pub item: ReadyItem,
    /// The session that held the partition when the item was delivered.
    pub session: String,
    /// The new state.
    pub write: ItemWrite,
}

impl Store {
    /// The fenced UPDATE: it changes the row only if the item's version and
    /// attempts are unchanged and its partition is owned by `session`, a
    /// live session (database clock), all checked in this one statement.
    fn result_statement(&self, ack: &Ack, expiry: Duration) -> Statement {
        let (item, w) = (&ack.item, &ack.write);
        let mut values: Vec<Value> = vec![w.status.into(), w.gate.into()];
        let data_set = if let Some(d) = &w.data {
            values.push(d.clone().into());
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
        values.extend([
            w.attempts.into(),
            w.last_error.clone().into(),
            item.id.clone().into(),
            item.version.into(),
            item.attempts.into(),
            item.partition_id.clone().into(),
            ack.session.clone().into(),
            ms(expiry).into(),
        ]);
        let bump = i32::from(w.new_step);
        let sql = format!(
            "UPDATE feed_items SET status = ?, gate = ?, {data_set}not_before = {not_before}, \
             attempts = ?, last_error = ?, version = version + {bump}, updated_at = {{now}} \
             WHERE id = ? AND version = ? AND attempts = ? AND EXISTS (SELECT 1 FROM feed_partitions p \
             JOIN feed_processors s ON s.id = p.owner WHERE p.id = ? AND p.owner = ? \
             AND s.heartbeat_at >= {{now}} - ?)"
        );
        stmt(self.backend, &sql, values)
    }

    /// PostgreSQL and SQLite: every result of the batch in one fenced
    /// `UPDATE … FROM (VALUES …) RETURNING id` (one round trip). The fence
    /// is the same as [`Self::result_statement`]'s, per row; RETURNING says
    /// which rows passed it.
    async fn write_batch(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        let pg = self.backend == DbBackend::Postgres;
        let row = if pg {
            "(?::text, ?::bigint, ?::int, ?::text, ?::text, ?::text, ?::bigint, ?::bytea, ?::bigint, ?::int, ?::text, ?::int)"
        } else {
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        };
        let mut values: Vec<Value> = Vec::with_capacity(acks.len() * 12 + 1);
        let n = bucket(acks.len());
        for a in acks {
            values.extend(row_values(a));
        }
        for _ in acks.len()..n {
            values.extend(null_row());
        }
        values.push(ms(expiry).into());
        let rows = vec![row; n].join(", ");
        let cols = "id, old_version, old_attempts, partition_id, session, status, gate, data, delay, attempts, last_error, bump";
        let source = if pg {
            format!("(VALUES {rows}) AS v({cols})")
        } else {
            let named: Vec<String> = cols
                .split(", ")
                .enumerate()
                .map(|(n, c)| format!("column{} AS {c}", n + 1))
                .collect();
            format!("(SELECT {} FROM (VALUES {rows})) AS v", named.join(", "))
        };
        let returning = if pg { "i.id" } else { "id" };
        let sql = format!(
            "UPDATE feed_items AS i SET status = v.status, gate = v.gate, data = COALESCE(v.data, i.data), \
             not_before = CASE WHEN v.delay IS NULL THEN NULL ELSE {{now}} + v.delay END, \
             attempts = v.attempts, last_error = v.last_error, version = i.version + v.bump, updated_at = {{now}} \
             FROM {source} \
             WHERE i.id = v.id AND i.version = v.old_version AND i.attempts = v.old_attempts \
             AND EXISTS (SELECT 1 FROM feed_partitions p JOIN feed_processors s ON s.id = p.owner \
             WHERE p.id = v.partition_id AND p.owner = v.session AND s.heartbeat_at >= {{now}} - ?) \
             RETURNING {returning}"
        );
        let st = stmt(self.backend, &sql, values);
        let rows = self
            .retry(|| async {
                self.count(1);
                self.db.query_all_raw(st.clone()).await
            })
            .await?;
        let written: std::collections::HashSet<String> = rows
            .iter()
            .filter_map(|r| r.try_get::<String>("", "id").ok())
            .collect();
        Ok(acks.iter().map(|a| written.contains(&a.item.id)).collect())
    }

    /// Writes many results in one transaction (one commit instead of one
    /// per item), each with its own fence; returns, per result, whether it
    /// was written (false = rejected as stale). Transient conflicts retry
    /// the whole batch.
    pub async fn write_results(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        if acks.is_empty() {
            return Ok(vec![]);
        }
        if self.backend != DbBackend::MySql {
            let mut out = Vec::with_capacity(acks.len());
            for chunk in acks.chunks(BATCH_ROWS) {
                out.extend(self.write_batch(chunk, expiry).await?);
            }
            return Ok(out);
        }
        if acks.len() > 1 {
            let mut out = Vec::with_capacity(acks.len());
            for chunk in acks.chunks(BATCH_ROWS) {
                match self.write_batch_mysql(chunk, expiry).await? {
                    Some(all) => out.extend(all),
                    None => out.extend(self.write_each(chunk, expiry).await?),
                }
            }
            return Ok(out);
        }
        self.write_each(acks, expiry).await
    }

    /// MySQL/MariaDB (no UPDATE … RETURNING): the whole batch in one
    /// multi-table UPDATE with the same per-row fence. When every row was
    /// written it commits; when some were rejected it rolls back and
    /// returns None, and the caller writes the rows one by one to learn
    /// which (rejections are rare: a lease change mid-call).
    async fn write_batch_mysql(&self, acks: &[Ack], expiry: Duration) -> Result<Option<Vec<bool>>> {
        let row = "SELECT ? AS id, ? AS old_version, ? AS old_attempts, ? AS partition_id, ? AS session, \
                   ? AS status, ? AS gate, ? AS data, ? AS delay, ? AS attempts, ? AS last_error, ? AS bump";
        let mut values: Vec<Value> = Vec::with_capacity(acks.len() * 12 + 1);
        for a in acks {
            values.extend(row_values(a));
        }
        for _ in acks.len()..bucket(acks.len()) {
            values.extend(null_row());
        }
        values.push(ms(expiry).into());
        let rows = vec![row; bucket(acks.len())].join(" UNION ALL ");
        let sql = format!(
            "UPDATE feed_items i JOIN ({rows}) v ON i.id = v.id \
             JOIN feed_partitions p ON p.id = v.partition_id JOIN feed_processors s ON s.id = p.owner \
             SET i.status = v.status, i.gate = v.gate, i.data = COALESCE(v.data, i.data), \
             i.not_before = CASE WHEN v.delay IS NULL THEN NULL ELSE {{now}} + v.delay END, \
             i.attempts = v.attempts, i.last_error = v.last_error, i.version = i.version + v.bump, \
             i.updated_at = {{now}} \
             WHERE i.version = v.old_version AND i.attempts = v.old_attempts \
             AND p.owner = v.session AND s.heartbeat_at >= {{now}} - ?"
        );
        let st = stmt(self.backend, &sql, values);
        let n = acks.len() as u64;
        self.retry(|| async {
            let txn = self.db.begin().await?;
            self.count(1);
            let written = txn.execute_raw(st.clone()).await?.rows_affected();
            if written == n {
                txn.commit().await?;
                Ok(Some(vec![true; acks.len()]))
            } else {
                txn.rollback().await?;
                Ok(None)
            }
        })
        .await
    }

    /// MySQL/MariaDB: one fenced UPDATE per result, in one transaction (one commit).
    async fn write_each(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<bool>> {
        if acks.len() == 1 {
            let st = self.result_statement(&acks[0], expiry);
            return self
                .retry(|| async {
                    self.count(1);
                    self.db
                        .execute_raw(st.clone())
                        .await
                        .map(|r| vec![r.rows_affected() == 1])
                })
                .await;
        }
        let statements: Vec<Statement> = acks
            .iter()
            .map(|a| self.result_statement(a, expiry))
            .collect();
        self.retry(|| async {
            let txn = self.db.begin().await?;
            let mut out = Vec::with_capacity(statements.len());
            for st in &statements {
                self.count(1);
                out.push(txn.execute_raw(st.clone()).await?.rows_affected() == 1);
            }
            txn.commit().await?;
            Ok(out)
        })
        .await
    }
}

/// One result as the 12 values of a batch row: id, old_version,
/// old_attempts, partition_id, session, status, gate, data, delay,
/// attempts, last_error, bump.
fn row_values(a: &Ack) -> [Value; 12] {
    let (item, w) = (&a.item, &a.write);
    [
        item.id.clone().into(),
        item.version.into(),
        item.attempts.into(),
        item.partition_id.clone().into(),
        a.session.clone().into(),
        w.status.into(),
        w.gate.into(),
        w.data.clone().into(),
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

/// A padding row: a NULL id never matches an item.
fn null_row() -> [Value; 12] {
    [
        Value::String(None),
        Value::BigInt(None),
        Value::Int(None),
        Value::String(None),
        Value::String(None),
        Value::String(None),
        Value::BigInt(None),
        Value::Bytes(None),
        Value::BigInt(None),
        Value::Int(None),
        Value::String(None),
        Value::Int(None),
    ]
}
