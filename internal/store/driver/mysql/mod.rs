//! MySQL and MariaDB: `ON DUPLICATE KEY`, `CONCAT`, binary comparison for
//! id prefixes, `UPDATE … JOIN` for result batches (no `UPDATE … FROM`
//! and no `RETURNING` on `UPDATE`), and `DELETE … LIMIT`.

use sea_orm::Value;
use sea_orm::sqlx::error::DatabaseError;

use super::{Dialect, Sql, TokenLocks};

pub(crate) mod results;

pub(super) const DIALECT: Dialect = Dialect {
    now: "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
    numbered: false,
    data_column: |alias| format!("{alias}.data"),
    // A derived table with a BLOB column (`data`) is a temporary table on
    // disk for every refill; a parenthesized branch is read as it is.
    limited_branch: |_| ("(", ")".to_string()),
    id_version_pairs: ("(", "", ""),
    seq: "seq",
    new_work: None,
    // MySQL counts an updated duplicate as 2 rows, a new one as 1.
    keep_existing: " ON DUPLICATE KEY UPDATE version = version + 1",
    add_to_minute: " ON DUPLICATE KEY UPDATE items = items + VALUES(items), \
        retried = retried + VALUES(retried), failed = failed + VALUES(failed)",
    // `=` ignores case under MariaDB's usual collations.
    id_starts: "BINARY SUBSTR(id, 1, ",
    // Result writes lock the partition in a statement of their own.
    fence_lock: "",
    for_update: " FOR UPDATE",
    // A creation reads every token `FOR UPDATE` at REPEATABLE READ (next-key
    // locks, the gap past the last row too), so two creations take turns
    // (or one is a deadlock's victim, and retried); the enqueues share-lock
    // the rows they read, which that read waits for. A server set to READ
    // COMMITTED leaves one gap: an enqueue without a token row of its own
    // (the legacy token) while the very first token is created.
    token_locks: TokenLocks {
        own: " LOCK IN SHARE MODE",
        every: " LOCK IN SHARE MODE",
        create: None,
        isolation: Some(sea_orm::IsolationLevel::RepeatableRead),
    },
    notify: None,
    concat: |parts| format!("CONCAT({})", parts.join(", ")),
    concurrent_writes: true,
    embedded: false,
    several_hosts: false,
    transaction_pooler: false,
    plan_once: None,
    create_database,
    item_delete,
    stale_statistics: None,
    upsert: on_duplicate,
    autovacuum_off: None,
    // MariaDB does not take `owner IS NULL` for a constant: ordered by the
    // whole key, it sorted every unowned partition for each page (98 ms
    // per 500 of 60,000; 1.2 ms in id order).
    unowned_order: "id",
    // Left to choose by its statistics of the moment, MariaDB at times read
    // a probe through an index of the whole table instead (every available
    // item by `feed_items_updated`, or every item newest first by `seq`):
    // on 30,000 one-item partitions the held slice's probes then took 70–84 %
    // of the server's CPU, and one slice ran for over 20 minutes.
    ready_index: " FORCE INDEX (feed_items_ready)",
    null_fixes_order: true,
};

/// A sub-select on the table being deleted from cannot be limited, but
/// `DELETE … LIMIT` can (ordered, so that it is the same rows on a replica).
fn item_delete(s: &mut Sql, ids: Vec<Value>, partition_ok: &dyn Fn(&mut Sql), batch: i64) {
    s.push("DELETE FROM feed_items WHERE partition_id IN (")
        .binds(ids)
        .push(
            ") AND status <> 'available' \
             AND EXISTS (SELECT 1 FROM feed_partitions p WHERE p.id = feed_items.partition_id \
             AND ",
        );
    partition_ok(s);
    s.push(&format!(") ORDER BY partition_id, seq LIMIT {batch}"));
}

/// Deadlock (1213), lock wait timeout (1205), or a server that cannot
/// write ([`READ_ONLY`]); None for another driver's error.
pub(super) fn transient(d: &dyn DatabaseError) -> Option<bool> {
    let my = d.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>()?;
    Some(matches!(my.number(), 1213 | 1205) || READ_ONLY.contains(&my.number()))
}

/// A write refused because the server is read-only (1290 `--read-only`,
/// 1836 read-only mode, 1792 a read-only transaction): a replica, or a
/// demoted primary; the connection is on the wrong node.
pub(super) const READ_ONLY: [u16; 3] = [1290, 1836, 1792];

/// 1049 (unknown database), 1045 (access denied: user or password), 1044
/// (the user may not use the database) and 1698 (access denied to a user
/// that logs in another way); None for another driver's error.
pub(super) fn refusal(d: &dyn DatabaseError) -> Option<Option<super::Refusal>> {
    let my = d.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>()?;
    Some(match my.number() {
        1049 => Some(super::Refusal::NoDatabase),
        1044 | 1045 | 1698 => Some(super::Refusal::Login),
        _ => None,
    })
}

/// `ON DUPLICATE KEY UPDATE` (MySQL names no key: any unique one counts).
fn on_duplicate(key: &str, columns: &[&str]) -> String {
    if columns.is_empty() {
        return format!(" ON DUPLICATE KEY UPDATE {key} = {key}");
    }
    let set: Vec<String> = columns
        .iter()
        .map(|c| format!("{c} = VALUES({c})"))
        .collect();
    format!(" ON DUPLICATE KEY UPDATE {}", set.join(", "))
}

/// The hint for a missing database: `CREATE DATABASE` through the
/// client, which asks for the password (`-p`) only when the URL has one.
fn create_database(host: &str, port: &str, user: &str, name: &str, password: bool) -> String {
    let user = super::connect::user_flag("-u", user);
    let p = if password { " -p" } else { "" };
    format!(
        "create it with `CREATE DATABASE {name};` (e.g. mysql -h {host} -P {port}{user}{p} -e 'CREATE DATABASE {name}')"
    )
}

#[cfg(test)]
mod hint_tests {
    #[test]
    fn the_client_asks_for_a_password_only_when_the_url_has_one() {
        let with = super::create_database("db", "3306", "feed", "f", true);
        assert!(
            with.contains("mysql -h db -P 3306 -u feed -p -e 'CREATE DATABASE f'"),
            "{with}"
        );
        let without = super::create_database("db", "3306", "root", "f", false);
        assert!(
            without.contains("mysql -h db -P 3306 -u root -e 'CREATE DATABASE f'"),
            "{without}"
        );
    }
}
