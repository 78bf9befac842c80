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

/// Appended to an `INSERT INTO feed_completions (minute, items)` so that
/// the minute's existing row is added to.
pub fn add_to_minute(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::MySql => " ON DUPLICATE KEY UPDATE items = items + VALUES(items)",
        _ => " ON CONFLICT (minute) DO UPDATE SET items = feed_completions.items + excluded.items",
    }
}

/// The first `?` characters of `id` compared to `?` byte for byte, so an
/// id prefix matches the same ids on every backend: `LIKE` ignores case on
/// SQLite, and so does `=` under MariaDB's usual collations.
pub fn id_starts(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::MySql => "BINARY SUBSTR(id, 1, ?) = ?",
        _ => "SUBSTR(id, 1, ?) = ?",
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

/// The statement that wakes LISTENing processors at once after a write
/// that makes work runnable; None where processors only poll (PostgreSQL
/// alone has LISTEN/NOTIFY; an insert trigger covers plain-SQL producers).
pub fn notify(backend: DbBackend) -> Option<&'static str> {
    match backend {
        DbBackend::Postgres => Some("NOTIFY feed_items"),
        _ => None,
    }
}

/// SQLite's connection settings: WAL so readers never block the writer,
/// a busy timeout instead of immediate `SQLITE_BUSY`, and foreign keys on
/// (an item must name an existing partition, as elsewhere). Memory-mapping
/// the file was tried and drained 10–20 % slower in the drain bench.
pub fn sqlite(
    o: sea_orm::sqlx::sqlite::SqliteConnectOptions,
) -> sea_orm::sqlx::sqlite::SqliteConnectOptions {
    o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(std::time::Duration::from_secs(30))
        .foreign_keys(true)
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

/// A test that `id` is one of the rows `pick` (a `SELECT id …`) finds,
/// for an `UPDATE` of those rows. PostgreSQL locks them as it picks,
/// passing over rows another transaction is changing, and reads the pick
/// once into an array: as `id IN (…)`, with statistics that lag behind a
/// bulk load, it re-ran the pick once per row of the table (a 100,000-row
/// table took minutes). SQLite has one writer at a time, and runs a
/// subquery that names no outer column once.
pub fn picked(backend: DbBackend, pick: &str) -> String {
    match backend {
        DbBackend::Postgres => format!("id = ANY(ARRAY({pick} FOR UPDATE SKIP LOCKED))"),
        _ => format!("id IN ({pick})"),
    }
}

/// Whether an error is transient and the statement should be retried:
/// a dropped or unavailable connection, or a conflict the database asks
/// the client to retry. Read from the driver's error kind and codes, never
/// from message text: serialization failures and deadlocks (PostgreSQL
/// SQLSTATE 40001, 40P01, and connections ended by the server; MySQL 1213
/// deadlock, 1205 lock wait timeout) and SQLite BUSY/LOCKED (primary codes
/// 5 and 6).
pub fn is_transient(err: &sea_orm::DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    use sea_orm::{DbErr, RuntimeErr};
    let e = match err {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return false,
    };
    match e.as_ref() {
        Sqlx::Io(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed | Sqlx::WorkerCrashed => true,
        Sqlx::Database(d) => {
            if let Some(my) = d.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>() {
                return matches!(my.number(), 1213 | 1205);
            }
            let code = d.code().unwrap_or_default();
            if d.try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
                .is_some()
            {
                // The extended code's low byte is the primary code.
                return code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6));
            }
            // PostgreSQL: serialization failure, deadlock, a connection
            // ended by the server (57P0x) or a connection exception (08xxx).
            matches!(code.as_ref(), "40001" | "40P01")
                || code.starts_with("57P0")
                || code.starts_with("08")
        }
        _ => false,
    }
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

/// Whether `UPDATE … RETURNING` says which rows an update changed
/// (MariaDB has `RETURNING` only on `INSERT` and `DELETE`).
pub fn update_returning(backend: DbBackend) -> bool {
    matches!(backend, DbBackend::Postgres | DbBackend::Sqlite)
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

/// An integer column whose type differs by backend (PostgreSQL's
/// `LENGTH(…)` is 4-byte, the others' 8-byte): read as whichever fits.
pub struct Int(pub i64);

impl sea_orm::TryGetable for Int {
    fn try_get_by<I: sea_orm::ColIdx>(
        res: &sea_orm::QueryResult,
        index: I,
    ) -> std::result::Result<Self, sea_orm::TryGetError> {
        i64::try_get_by(res, index)
            .or_else(|_| i32::try_get_by(res, index).map(i64::from))
            .map(Int)
    }
}
