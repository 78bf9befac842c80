//! PostgreSQL: numbered placeholders, row locks that hold a fence to
//! commit, `UPDATE … FROM (VALUES …) RETURNING`, LISTEN/NOTIFY, and the
//! planner statistics and autovacuum setting Feed looks after.

use sea_orm::sqlx::error::DatabaseError;

use sea_orm::Value;

use super::results::RESULT_ROW;
use super::{Dialect, Sql, TokenLocks};

pub(super) const DIALECT: Dialect = Dialect {
    now: "(FLOOR(EXTRACT(EPOCH FROM CLOCK_TIMESTAMP()) * 1000)::BIGINT)",
    numbered: true,
    data_column,
    limited_branch: super::derived_branch,
    id_version_pairs: ("(VALUES ", "::text", "::bigint"),
    seq: "seq",
    new_work: Some("status = 'available'"),
    keep_existing: " ON CONFLICT (id) DO NOTHING",
    add_to_minute: " ON CONFLICT (minute) DO UPDATE SET items = feed_completions.items + excluded.items, \
        retried = feed_completions.retried + excluded.retried, failed = feed_completions.failed + excluded.failed",
    id_starts: "SUBSTR(id, 1, ",
    // The result write locks the partition row it read, so a lease change
    // waits for the write (or the write sees the new owner).
    fence_lock: " FOR SHARE OF p",
    for_update: " FOR UPDATE",
    // Without gap locks, a creation locks the table: EXCLUSIVE conflicts
    // with the ROW SHARE lock every `FOR SHARE` takes (even of no row),
    // not with plain reads, so the enqueues' read of every token needs no
    // row locks of its own.
    token_locks: TokenLocks {
        own: " FOR SHARE",
        every: "",
        create: Some("LOCK TABLE feed_producer_tokens IN EXCLUSIVE MODE"),
        isolation: None,
    },
    notify: Some("NOTIFY feed_items"),
    // Each part as text: `text || text` is immutable, `text || bigint` only
    // stable, which Citus refuses beside a column in an `UPDATE`.
    concat: |parts| {
        let parts: Vec<String> = parts.iter().map(|p| format!("CAST({p} AS TEXT)")).collect();
        parts.join(" || ")
    },
    concurrent_writes: true,
    embedded: false,
    several_hosts: true,
    transaction_pooler: true,
    plan_once: Some("SET LOCAL plan_cache_mode = force_generic_plan"),
    create_database: super::connect::createdb,
    item_delete,
    stale_statistics: Some(
        "SELECT COUNT(*) AS n FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid \
         WHERE s.relname IN ('feed_partitions', 'feed_items') AND s.schemaname = current_schema() \
         AND s.n_mod_since_analyze >= $1 \
         AND s.n_mod_since_analyze > $2 * GREATEST(c.reltuples, 0)::BIGINT",
    ),
    upsert: super::on_conflict,
    autovacuum_off: Some("SELECT current_setting('autovacuum') = 'off' AS off"),
    // The whole key: with statistics from before a drain PostgreSQL read a
    // status's partitions through another index and sorted them.
    unowned_order: "status, owner, id",
    ready_index: "",
    null_fixes_order: false,
};

fn data_column(alias: &str) -> String {
    format!("{alias}.data")
}

/// The pick is locked as it is read, passing over rows another transaction
/// is changing, and read once into an array: as `id IN (…)`, with
/// statistics that lag behind a bulk load, PostgreSQL re-ran the pick once
/// per row of the table (a 100,000-row table took minutes).
pub(super) fn picked(s: &mut Sql, after: &str, limit: i64) {
    s.push("id = ANY(ARRAY(");
    super::returning::page(s, "p.id", after, limit);
    s.push(" FOR UPDATE SKIP LOCKED))");
}

/// A result batch's `VALUES`: typed (its parameters carry no type), named
/// by an alias list.
pub(super) fn values_source(s: &mut Sql, rows: usize, values: Vec<Value>) -> &'static str {
    let mut values = values.into_iter();
    s.push("(VALUES ");
    for r in 0..rows {
        s.push(if r == 0 { "(" } else { ", (" });
        for (k, (_, t)) in RESULT_ROW.iter().enumerate() {
            if k > 0 {
                s.push(", ");
            }
            s.bind(values.next().unwrap_or(Value::Int(None)));
            s.push(&format!("::{t}"));
        }
        s.push(")");
    }
    let names: Vec<&str> = RESULT_ROW.iter().map(|(c, _)| *c).collect();
    s.push(&format!(") AS v({})", names.join(", ")));
    "i.partition_id, i.id"
}

/// Row addresses picked partition by partition (a lateral sub-select,
/// which the planner cannot turn into a scan of the whole table).
fn item_delete(s: &mut Sql, ids: Vec<Value>, partition_ok: &dyn Fn(&mut Sql), batch: i64) {
    s.push(&format!(
        "DELETE FROM feed_items WHERE ctid = ANY(ARRAY(SELECT i.ctid FROM feed_partitions p \
         CROSS JOIN LATERAL (SELECT ctid FROM feed_items WHERE partition_id = p.id \
         AND status <> 'available' LIMIT {batch}) i \
         WHERE p.id IN ("
    ))
    .binds(ids)
    .push(") AND ");
    partition_ok(s);
    s.push(&format!(" LIMIT {batch})) AND status <> 'available'"));
}

/// Serialization failure, deadlock, a connection ended by the server
/// (57P0x), a connection exception (08xxx), or a connection on a server
/// that cannot write (25006: a standby, a demoted primary); None for
/// another driver's error.
pub(super) fn transient(d: &dyn DatabaseError) -> Option<bool> {
    let pg = d.try_downcast_ref::<sea_orm::sqlx::postgres::PgDatabaseError>()?;
    let code = pg.code();
    Some(
        matches!(code, "40001" | "40P01" | READ_ONLY)
            || code.starts_with("57P0")
            || code.starts_with("08"),
    )
}

/// read_only_sql_transaction: a write (or LISTEN) on a server in recovery
/// or read-only: the connection is on the wrong node.
pub(super) const READ_ONLY: &str = "25006";

/// invalid_sql_statement_name and duplicate_prepared_statement: a named
/// prepared statement missing, or one of another client's in the way, as
/// happens through a pooler in transaction mode.
pub(super) const LOST_STATEMENT: [&str; 2] = ["26000", "42P05"];

/// 3D000 (invalid_catalog_name: no such database) and 28P01 / 28000 (a
/// wrong password, an unknown role, no pg_hba.conf entry); None for
/// another driver's error.
pub(super) fn refusal(d: &dyn DatabaseError) -> Option<Option<super::Refusal>> {
    let pg = d.try_downcast_ref::<sea_orm::sqlx::postgres::PgDatabaseError>()?;
    Some(match pg.code() {
        "3D000" => Some(super::Refusal::NoDatabase),
        "28P01" | "28000" => Some(super::Refusal::Login),
        _ => None,
    })
}
