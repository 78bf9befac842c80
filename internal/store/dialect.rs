//! The few places where SQLite, PostgreSQL and MySQL/MariaDB differ, kept in one file.

use sea_orm::{DbBackend, Statement, Value};

/// The database clock as integer epoch milliseconds. Every time comparison
/// goes through this, never through a processor's clock.
pub fn now_ms(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "(FLOOR(EXTRACT(EPOCH FROM CLOCK_TIMESTAMP()) * 1000)::BIGINT)",
        DbBackend::MySql => "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    }
}

/// `data` as bytes: SQLite keeps whatever type a producer inserted (a TEXT
/// literal stays TEXT), so it is cast on the way out.
pub fn data_column(backend: DbBackend, alias: &str) -> String {
    match backend {
        DbBackend::Sqlite => format!("CAST({alias}.data AS BLOB)"),
        _ => format!("{alias}.data"),
    }
}

/// Builds a statement from SQL written with `?` placeholders and `{now}` for
/// the database clock; PostgreSQL gets `$1, $2, …`. Feed's SQL never has a
/// literal `?` inside a string.
pub fn stmt(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let sql = sql.replace("{now}", now_ms(backend));
    let sql = if backend == DbBackend::Postgres {
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    } else {
        sql
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// `?, ?, ?` for an `IN (…)` list of `n` values.
pub fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The column that orders a partition's items as they were written:
/// SQLite's `rowid`, a `seq` identity column elsewhere.
pub fn seq(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Sqlite => "rowid",
        _ => "seq",
    }
}

/// Appended to an `INSERT` of a partition so that an existing one stays
/// (producers creating the same partition at once all succeed); the
/// statement affects exactly 1 row only when it created the partition
/// (MySQL counts an updated duplicate as 2).
pub fn keep_existing(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::MySql => " ON DUPLICATE KEY UPDATE version = version + 1",
        _ => " ON CONFLICT (id) DO NOTHING",
    }
}

/// Appended to a sub-select of a result write, so that the fence holds at
/// commit: PostgreSQL locks the partition row it read, so a lease change
/// waits for the write (or the write sees the new owner). SQLite has one
/// writer at a time; MySQL/MariaDB lock in a statement of their own.
pub fn fence_lock(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => " FOR SHARE OF p",
        _ => "",
    }
}

/// SQL expressions joined into one string.
pub fn concat(backend: DbBackend, parts: &[&str]) -> String {
    match backend {
        DbBackend::MySql => format!("CONCAT({})", parts.join(", ")),
        _ => parts.join(" || "),
    }
}

/// A row lock taken by a `SELECT` inside a transaction (SQLite's write
/// transaction already excludes other writers).
pub fn for_update(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Sqlite => "",
        _ => " FOR UPDATE",
    }
}

/// Whether an error is a transient conflict that is retried rather than
/// reported: serialization failures and deadlocks (PostgreSQL 40001/40P01,
/// MySQL 1213/1205), SQLite BUSY/LOCKED, and dropped connections.
pub fn is_transient(err: &sea_orm::DbErr) -> bool {
    let text = err.to_string();
    [
        "40001",
        "40P01",
        "1213",
        "1205",
        "database is locked",
        "database table is locked",
        "SQLITE_BUSY",
        "Deadlock",
        "deadlock",
        "could not serialize",
        "Connection reset",
        "connection closed",
        "PoolTimedOut",
        "pool timed out",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered() {
        let s = stmt(
            DbBackend::Postgres,
            "a = ? AND b = ?",
            vec![1.into(), 2.into()],
        );
        assert_eq!(s.sql, "a = $1 AND b = $2");
        let s = stmt(
            DbBackend::Sqlite,
            "a = ? AND b = ?",
            vec![1.into(), 2.into()],
        );
        assert_eq!(s.sql, "a = ? AND b = ?");
    }
}

/// How a batch of fenced results is written: one `UPDATE … FROM (VALUES …)
/// RETURNING` on PostgreSQL and SQLite; MariaDB has neither an `UPDATE …
/// FROM` nor `RETURNING` on `UPDATE`, so a multi-table `UPDATE … JOIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultBatch {
    /// `UPDATE … FROM (VALUES …) RETURNING`.
    Values,
    /// `UPDATE … JOIN` in a transaction.
    Join,
}

/// The result-batch statement shape of a backend.
pub fn result_batch(backend: DbBackend) -> ResultBatch {
    match backend {
        DbBackend::MySql => ResultBatch::Join,
        _ => ResultBatch::Values,
    }
}

/// The `VALUES` source of a result batch: `rows` of `cols`, typed on
/// PostgreSQL (its parameters carry no type), named through a subquery
/// on SQLite (whose `VALUES` columns are `column1…`). Also returns the
/// row template and the column `RETURNING` names the id by.
pub fn values_source(backend: DbBackend, n: usize, cols: &[&str]) -> (String, &'static str) {
    if backend == DbBackend::Postgres {
        let row = "(?::text, ?::bigint, ?::int, ?::text, ?::text, ?::text, ?::bigint, ?::bytea, ?::bigint, ?::int, ?::text, ?::int)";
        let rows = vec![row; n].join(", ");
        (format!("(VALUES {rows}) AS v({})", cols.join(", ")), "i.id")
    } else {
        let row = format!("({})", vec!["?"; cols.len()].join(", "));
        let rows = vec![row.as_str(); n].join(", ");
        let named: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(k, c)| format!("column{} AS {c}", k + 1))
            .collect();
        let source = format!("(SELECT {} FROM (VALUES {rows})) AS v", named.join(", "));
        (source, "id")
    }
}
