//! SQLite: one writer at a time (no row locks), `rowid` for write order,
//! `data` cast to bytes on the way out, and its connection settings.

use sea_orm::sqlx::error::DatabaseError;
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use sea_orm::Value;

use super::results::RESULT_ROW;
use super::{Dialect, Sql, TokenLocks};

pub(super) const DIALECT: Dialect = Dialect {
    now: "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    numbered: false,
    data_column,
    limited_branch: super::derived_branch,
    id_version_pairs: ("(VALUES ", "", ""),
    seq: "rowid",
    new_work: None,
    keep_existing: " ON CONFLICT (id) DO NOTHING",
    add_to_minute: " ON CONFLICT (minute) DO UPDATE SET items = feed_completions.items + excluded.items, \
        retried = feed_completions.retried + excluded.retried, failed = feed_completions.failed + excluded.failed",
    // `LIKE` ignores case here; a byte-for-byte prefix does not.
    id_starts: "SUBSTR(id, 1, ",
    // One writer at a time: a write transaction already excludes others.
    fence_lock: "",
    for_update: "",
    // A write transaction holds the one write lock: nothing to add.
    token_locks: TokenLocks {
        own: "",
        every: "",
        create: None,
        isolation: None,
    },
    notify: None,
    concat: |parts| parts.join(" || "),
    concurrent_writes: false,
    embedded: true,
    several_hosts: false,
    transaction_pooler: false,
    plan_once: None,
    create_database: super::connect::createdb,
    item_delete,
    stale_statistics: None,
    upsert: super::on_conflict,
    autovacuum_off: None,
    unowned_order: "status, owner, id",
    ready_index: "",
    null_fixes_order: true,
};

/// SQLite keeps whatever type a producer inserted (a TEXT literal stays
/// TEXT), so `data` is cast on the way out.
fn data_column(alias: &str) -> String {
    format!("CAST({alias}.data AS BLOB)")
}

/// A test that `id` is on the page of unowned partitions after `after`:
/// a subquery that names no outer column runs once.
pub(super) fn picked(s: &mut Sql, after: &str, limit: i64) {
    s.push("id IN (");
    super::returning::page(s, "p.id", after, limit);
    s.push(")");
}

/// A result batch's `VALUES`, whose columns are `column1…`: named
/// through a subquery.
pub(super) fn values_source(s: &mut Sql, rows: usize, values: Vec<Value>) -> &'static str {
    let named: Vec<String> = RESULT_ROW
        .iter()
        .enumerate()
        .map(|(k, (c, _))| format!("column{} AS {c}", k + 1))
        .collect();
    s.push(&format!("(SELECT {} FROM (VALUES ", named.join(", ")))
        .rows(rows, values)
        .push(")) AS v");
    "partition_id, id"
}

/// Built without `DELETE … LIMIT`: rowids are picked.
fn item_delete(s: &mut Sql, ids: Vec<Value>, partition_ok: &dyn Fn(&mut Sql), batch: i64) {
    s.push(
        "DELETE FROM feed_items WHERE rowid IN (SELECT i.rowid FROM feed_items i \
         JOIN feed_partitions p ON p.id = i.partition_id WHERE i.partition_id IN (",
    )
    .binds(ids)
    .push(") AND i.status <> 'available' AND ");
    partition_ok(s);
    s.push(&format!(" LIMIT {batch}) AND status <> 'available'"));
}

/// BUSY and LOCKED (primary codes 5 and 6, the extended code's low byte);
/// None for another driver's error.
pub(super) fn transient(d: &dyn DatabaseError) -> Option<bool> {
    let e = d.try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()?;
    let code = e.code().unwrap_or_default();
    Some(code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6)))
}

/// CANTOPEN (primary code 14): the file cannot be opened or created;
/// None for another driver's error.
pub(super) fn refusal(d: &dyn DatabaseError) -> Option<Option<super::Refusal>> {
    let e = d.try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()?;
    let code = e
        .code()
        .unwrap_or_default()
        .parse::<i32>()
        .unwrap_or_default();
    Some((code & 0xff == 14).then_some(super::Refusal::CannotOpen))
}

/// WAL so readers never block the writer, a busy timeout instead of
/// immediate `SQLITE_BUSY`, and foreign keys on (an item must name an
/// existing partition, as elsewhere). Memory-mapping the file was tried and
/// drained 10–20 % slower in the drain bench.
pub(crate) fn connect_options(o: SqliteConnectOptions) -> SqliteConnectOptions {
    o.journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(std::time::Duration::from_secs(30))
        .foreign_keys(true)
}

/// An SQLite URL's file as an absolute path; None for another database
/// or an in-memory one.
pub(crate) fn file(url: &str) -> Option<std::path::PathBuf> {
    if !url.starts_with("sqlite:") || url.contains(":memory:") || url.contains("mode=memory") {
        return None;
    }
    let opts: SqliteConnectOptions = url.parse().ok()?;
    std::path::absolute(opts.get_filename()).ok()
}
