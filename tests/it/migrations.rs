//! Migrations tested up and down from the schema before them, with data:
//! the autovacuum settings (PostgreSQL's per-table storage settings, set by
//! `up` and restored to the server defaults by `down`; the other backends
//! are untouched) and the failed items' own index.

use migration::{Migrator, MigratorTrait};
use sea_orm::{ConnectionTrait, DbBackend, TransactionTrait};
use serde_json::json;

use crate::support::{Backend, TestDb};
use crate::{backend_tests, on_all_backends};

/// `reloptions` of `table`, sorted (empty when at the defaults).
async fn options(db: &TestDb, table: &str) -> Vec<String> {
    let rows: Vec<Option<String>> = db
        .rows(
            &format!(
                "SELECT array_to_string(reloptions, ',') AS o FROM pg_class \
                 WHERE oid = '{table}'::regclass"
            ),
            &["o"],
        )
        .await;
    let mut v: Vec<String> = rows
        .into_iter()
        .flatten()
        .flat_map(|o| o.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|o| !o.is_empty())
        .collect();
    v.sort();
    v
}

on_all_backends!(autovacuum_settings_up_and_down);
async fn autovacuum_settings_up_and_down(db: TestDb) {
    let postgres = db.store.backend() == DbBackend::Postgres;
    if postgres {
        assert_eq!(
            options(&db, "feed_items").await,
            [
                "autovacuum_analyze_scale_factor=0.02",
                "autovacuum_vacuum_cost_delay=0",
                "autovacuum_vacuum_insert_scale_factor=0.01",
                "autovacuum_vacuum_scale_factor=0.01",
                "fillfactor=90",
            ]
        );
        assert_eq!(
            options(&db, "feed_partitions").await,
            [
                "autovacuum_analyze_scale_factor=0.02",
                "autovacuum_vacuum_cost_delay=0",
                "autovacuum_vacuum_scale_factor=0.01",
                "fillfactor=80",
            ]
        );
    }
    // Down past it (the migrations after it, then it) and up again, on
    // every backend.
    down_before(&db, "m20261124_000005").await;
    if postgres {
        assert!(options(&db, "feed_items").await.is_empty());
        assert!(options(&db, "feed_partitions").await.is_empty());
    }
    db.store.migrate().await.unwrap();
    if postgres {
        assert_eq!(options(&db, "feed_partitions").await.len(), 4);
    }
}

/// Migrates down to the schema before the migration named `name…`.
pub(crate) async fn down_before(db: &TestDb, name: &str) {
    let all = Migrator::migrations();
    let at = all
        .iter()
        .position(|m| m.name().starts_with(name))
        .unwrap_or_else(|| {
            panic!(
                "no migration {name} in {:?}",
                all.iter().map(|m| m.name().to_string()).collect::<Vec<_>>()
            )
        });
    let steps = (all.len() - at) as u32;
    // On one connection, as `Store::migrate` goes up: on SQLite a pooled
    // connection whose snapshot predates a step saw a column that another
    // had dropped already ("no such column" under load).
    let txn = db.store.connection().begin().await.unwrap();
    Migrator::down(&txn, Some(steps)).await.unwrap();
    txn.commit().await.unwrap();
}

/// The indexes of `feed_items`, sorted.
async fn item_indexes(db: &TestDb) -> Vec<String> {
    let sql = match db.backend {
        Backend::Postgres | Backend::Citus => {
            "SELECT indexname AS n FROM pg_indexes WHERE tablename = 'feed_items'"
        }
        Backend::Sqlite => {
            "SELECT name AS n FROM sqlite_master WHERE type = 'index' AND tbl_name = 'feed_items' \
             AND name NOT LIKE 'sqlite_%'"
        }
        Backend::Mysql => {
            "SELECT DISTINCT index_name AS n FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = 'feed_items'"
        }
    };
    let mut names: Vec<String> = db
        .rows::<(String,)>(sql, &["n"])
        .await
        .into_iter()
        .map(|(n,)| n)
        .collect();
    names.sort();
    names
}

on_all_backends!(failed_items_index_up_and_down);
/// From the schema before it, with items in every status: where partial
/// indexes exist, `feed_items_updated` gives way to `feed_items_failed`
/// (failed items only), and failed items are still listed and retried;
/// `down` brings the old index back. MySQL/MariaDB keep theirs.
async fn failed_items_index_up_and_down(db: TestDb) {
    down_before(&db, "m20261125_000008").await;
    let before = item_indexes(&db).await;
    assert!(
        before.contains(&"feed_items_updated".to_string()),
        "{before:?}"
    );
    db.partition_of("p", true, false, "block", &["ok", "bad", "open"])
        .await;
    db.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'ok'")
        .await;
    db.sql("UPDATE feed_items SET status = 'failed', last_error = 'boom' WHERE id = 'bad'")
        .await;
    db.store.migrate().await.unwrap();
    let after = item_indexes(&db).await;
    let partial = db.backend != Backend::Mysql;
    assert_eq!(
        after.contains(&"feed_items_failed".to_string()),
        partial,
        "{after:?}"
    );
    assert_eq!(
        after.contains(&"feed_items_updated".to_string()),
        !partial,
        "{after:?}"
    );
    let status = db.store.status(None).await.unwrap();
    let failed: Vec<&str> = status.failed_items.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(failed, ["bad"]);
    let r = db
        .store
        .retry_failed(feed::store::RetryScope::All)
        .await
        .unwrap();
    assert_eq!(r.items, 1);
    assert_eq!(db.item_row("bad").await.status, "available");
    assert_eq!(db.item_row("ok").await.data, json!({}));
    down_before(&db, "m20261125_000008").await;
    assert_eq!(item_indexes(&db).await, before);
    db.store.migrate().await.unwrap();
    assert_eq!(item_indexes(&db).await, after);
}

on_all_backends!(events_up_and_down);
/// From the schema before it, with partitions and items: `up` adds the
/// outbox (a cancel of an existing partition writes an event with its
/// counts); `down` removes it and keeps the work.
async fn events_up_and_down(db: TestDb) {
    down_before(&db, "m20261125_000009").await;
    db.partition_of("p", true, false, "block", &["a", "b"])
        .await;
    db.partition_of("q", true, false, "block", &["c"]).await;
    db.sql("UPDATE feed_items SET status = 'complete' WHERE partition_id = 'p'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'q'")
        .await;
    db.store.migrate().await.unwrap();
    assert!(db.store.events(None, None, 10).await.unwrap().is_empty());
    db.store.cancel("p").await.unwrap();
    let events = db.store.events(None, None, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].partition_id.as_str(), events[0].kind.as_str()),
        ("p", "partition.cancelled")
    );
    assert_eq!(events[0].counts.complete, 2);
    down_before(&db, "m20261125_000009").await;
    assert!(
        db.store.events(None, None, 10).await.is_err(),
        "the table is gone"
    );
    db.sql("UPDATE feed_partitions SET status = 'available' WHERE id = 'p'")
        .await;
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 3);
    db.store.migrate().await.unwrap();
    db.store.cancel("p").await.unwrap();
    assert_eq!(db.store.events(None, None, 10).await.unwrap().len(), 1);
}

on_all_backends!(flow_control_up_and_down);
/// From the schema before it, with partitions, items and a live session:
/// `up` adds the tenant and override columns (NULL on existing rows), the
/// limits, buckets and slots tables and the session's send rate; `down`
/// removes them and keeps the work.
async fn flow_control_up_and_down(db: TestDb) {
    down_before(&db, "m20261126_000011").await;
    db.partition_of("p", true, false, "block", &["a", "b"])
        .await;
    db.sql(
        "INSERT INTO feed_processors (id, hostname, pid, software_version, started_at, heartbeat_at) \
         VALUES ('s1', 'h', 1, 'v', 0, 0)",
    )
    .await;
    db.store.migrate().await.unwrap();
    assert_eq!(
        db.count(
            "SELECT COUNT(*) AS n FROM feed_partitions \
             WHERE tenant IS NULL AND weight IS NULL AND max_in_flight IS NULL"
        )
        .await,
        1
    );
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_processors WHERE send_rate IS NULL")
            .await,
        1
    );
    db.sql("UPDATE feed_partitions SET tenant = 'acme', weight = 2 WHERE id = 'p'")
        .await;
    db.sql("INSERT INTO feed_limits (tenant, max_in_flight, rate) VALUES ('acme', 3, 2.5)")
        .await;
    let limits = db.store.limits().await.unwrap();
    assert_eq!(
        (
            limits[0].tenant.as_str(),
            limits[0].max_in_flight,
            limits[0].rate
        ),
        ("acme", Some(3), Some(2.5))
    );
    db.sql("INSERT INTO feed_buckets (name, paid_until) VALUES ('fleet', 0)")
        .await;
    db.sql(
        "INSERT INTO feed_slots (tenant, session_id, slots, wanted) VALUES ('acme', 's1', 1, 1)",
    )
    .await;
    down_before(&db, "m20261126_000011").await;
    assert!(db.store.limits().await.is_err(), "the table is gone");
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 2);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions").await,
        1
    );
    db.store.migrate().await.unwrap();
    assert!(db.store.limits().await.unwrap().is_empty());
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions WHERE tenant IS NULL")
            .await,
        1
    );
}

/// The definitions of `feed_items_ready` and `feed_items_seq` (PostgreSQL).
async fn work_indexes(db: &TestDb) -> Vec<String> {
    let sql = "SELECT indexdef AS n FROM pg_indexes \
               WHERE indexname IN ('feed_items_ready', 'feed_items_seq') ORDER BY indexname";
    let rows = db.rows::<(String,)>(sql, &["n"]).await;
    rows.into_iter().map(|(d,)| d).collect()
}

on_all_backends!(open_items_index_up_and_down);
/// From the schema before it, with items in every status: on PostgreSQL
/// `feed_items_ready` then holds open items only (neither complete nor
/// cancelled) and `feed_items_seq` available ones, and the open items are
/// still found; `down` brings the full indexes back. The other databases
/// keep theirs.
async fn open_items_index_up_and_down(db: TestDb) {
    down_before(&db, "m20261126_000012").await;
    let before = item_indexes(&db).await;
    // SQLite's dispatch index is `feed_items_dispatch`, ending with `rowid`.
    let ready = match db.backend {
        Backend::Sqlite => "feed_items_dispatch",
        _ => "feed_items_ready",
    };
    assert!(before.contains(&ready.to_string()), "{before:?}");
    let postgres = db.backend == Backend::Postgres;
    let full = if postgres {
        work_indexes(&db).await
    } else {
        vec![]
    };
    assert!(full.iter().all(|d| !d.contains("WHERE")), "{full:?}");
    db.partition_of("p", true, false, "block", &["done", "gone", "bad", "open"])
        .await;
    db.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'done'")
        .await;
    db.sql("UPDATE feed_items SET status = 'cancelled' WHERE id = 'gone'")
        .await;
    db.sql("UPDATE feed_items SET status = 'failed', last_error = 'boom' WHERE id = 'bad'")
        .await;
    db.store.migrate().await.unwrap();
    assert_eq!(item_indexes(&db).await, before);
    if postgres {
        let partial = work_indexes(&db).await;
        assert_eq!(partial.len(), 2, "{partial:?}");
        assert!(
            partial[0].contains("WHERE")
                && partial[0].contains("'complete'")
                && partial[0].contains("'cancelled'"),
            "{partial:?}"
        );
        assert!(
            partial[1].contains("WHERE") && partial[1].contains("'available'"),
            "{partial:?}"
        );
    }
    let open: Vec<String> = db
        .rows::<(String,)>(
            "SELECT id AS n FROM feed_items WHERE partition_id = 'p' AND status = 'available' \
             AND gate = 0 ORDER BY id",
            &["n"],
        )
        .await
        .into_iter()
        .map(|(n,)| n)
        .collect();
    assert_eq!(open, ["open"]);
    let status = db.store.status(None).await.unwrap();
    let failed: Vec<&str> = status.failed_items.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(failed, ["bad"]);
    down_before(&db, "m20261126_000012").await;
    assert_eq!(item_indexes(&db).await, before);
    if postgres {
        assert_eq!(work_indexes(&db).await, full);
    }
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 4);
    db.store.migrate().await.unwrap();
}

on_all_backends!(parents_and_schedules_up_and_down);
/// From the schema before them, with a partition and its item: `up` adds
/// `feed_items.parent_id` (NULL on the item there) and `feed_schedules`;
/// `down` removes both and keeps the work; `up` again restores them.
async fn parents_and_schedules_up_and_down(db: TestDb) {
    down_before(&db, "m20261130_000020").await;
    db.partition_of("p", true, false, "block", &["a"]).await;
    assert!(db.store.schedules().await.is_err(), "no table yet");
    db.store.migrate().await.unwrap();
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE parent_id IS NULL")
            .await,
        1
    );
    let r = feed::recurring::Recurring::new("nightly", "0 2 * * *", "{\"data\": 1}\n");
    feed::recurring::set(&db.store, &r).await.unwrap();
    down_before(&db, "m20261130_000020").await;
    assert!(db.store.schedules().await.is_err(), "the table is gone");
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 1);
    db.store.migrate().await.unwrap();
    assert!(db.store.schedules().await.unwrap().is_empty());
}

/// Whether `sql` fails.
async fn fails(db: &TestDb, sql: &str) -> bool {
    db.store.connection().execute_unprepared(sql).await.is_err()
}

on_all_backends!(item_keys_up_and_down);
/// From the schema before it, with items (one deleted, so SQLite's write
/// order has a gap): `up` makes `(partition_id, id)` the items' key, the
/// rows and their write order kept, so a second partition may have an
/// item `a` and one partition still not two; `down` brings the key on
/// `id` back once the ids are unique again, and `up` runs twice as once.
async fn item_keys_up_and_down(db: TestDb) {
    down_before(&db, "m20261201_000022").await;
    db.partition_of("p", true, false, "block", &["a", "gap", "b"])
        .await;
    db.sql("DELETE FROM feed_items WHERE id = 'gap'").await;
    db.partition_of::<&str>("q", true, false, "block", &[])
        .await;
    let second_a = "INSERT INTO feed_items (id, partition_id, data) VALUES ('a', 'q', '{}')";
    assert!(
        fails(&db, second_a).await,
        "ids were unique across partitions"
    );
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.sql(second_a).await;
    assert!(fails(&db, second_a).await, "one partition, one `a`");
    let mut all = feed::store::listing::ItemFilter::default();
    all.limit = 10;
    let order = db.store.items("p", &all).await.unwrap();
    let ids: Vec<&str> = order.data.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "write order kept");
    // Events are still written when a partition ends.
    db.store.cancel("p").await.unwrap();
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_events WHERE partition_id = 'p'")
            .await,
        1
    );
    db.sql("DELETE FROM feed_items WHERE partition_id = 'q'")
        .await;
    down_before(&db, "m20261201_000022").await;
    assert!(fails(&db, second_a).await, "the key is on id again");
    db.store.migrate().await.unwrap();
    db.sql(second_a).await;
}

backend_tests!(wake_without_trigger_up_and_down: postgres => Postgres);
/// PostgreSQL: `up` drops the `feed_items_notify` trigger (Feed's writes
/// notify themselves), `down` puts it back, and `up` again drops it.
async fn wake_without_trigger_up_and_down(db: TestDb) {
    let triggers = "SELECT COUNT(*) AS n FROM pg_trigger \
                    WHERE tgrelid = 'feed_items'::regclass AND NOT tgisinternal";
    assert_eq!(db.count(triggers).await, 0);
    down_before(&db, "m20261201_000023").await;
    assert_eq!(db.count(triggers).await, 1);
    db.store.migrate().await.unwrap();
    assert_eq!(db.count(triggers).await, 0);
}

/// How many triggers the database has.
async fn triggers(db: &TestDb) -> i64 {
    db.count(match db.backend {
        Backend::Sqlite => "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'trigger'",
        Backend::Mysql => {
            "SELECT COUNT(*) AS n FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        }
        _ => "SELECT COUNT(*) AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
              WHERE NOT t.tgisinternal AND c.relname LIKE 'feed_%'",
    })
    .await
}

on_all_backends!(events_without_trigger_up_and_down);
/// Migrated, Feed has no trigger. `down` puts the events trigger back (a
/// status set with SQL writes an event again); `up` drops it again.
async fn events_without_trigger_up_and_down(db: TestDb) {
    assert_eq!(triggers(&db).await, 0);
    down_before(&db, "m20261201_000024").await;
    assert_eq!(triggers(&db).await, 1);
    db.partition_of::<&str>("p", true, false, "block", &[])
        .await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'p'")
        .await;
    assert_eq!(db.store.events(None, None, 10).await.unwrap().len(), 1);
    db.store.migrate().await.unwrap();
    assert_eq!(triggers(&db).await, 0);
}

on_all_backends!(figures_and_audit_up_and_down);
/// From the schema before the figures: `up` adds `gate_at` (0 on existing
/// partitions: not moved since created), the backlog's lease row, the
/// retried and failed counts per minute and the audit table; the backlog
/// and the audit work on the migrated rows; `down` and `up` again keep the
/// work.
async fn figures_and_audit_up_and_down(db: TestDb) {
    down_before(&db, "m20261203_000026").await;
    db.partition_of("p", true, false, "block", &["a", "b"])
        .await;
    db.store.migrate().await.unwrap();
    assert_eq!(
        db.count("SELECT gate_at AS n FROM feed_partitions WHERE id = 'p'")
            .await,
        0
    );
    let backlog_row = "SELECT COUNT(*) AS n FROM feed_maintenance WHERE name = 'backlog'";
    assert_eq!(db.count(backlog_row).await, 1);
    assert_eq!(db.store.backlog().await.unwrap()[0].ready, 2);
    db.store
        .record_audit("me", "pause", "tenant=x", 1, 1)
        .await
        .unwrap();
    assert_eq!(db.store.audit(10).await.unwrap()[0].action, "pause");
    down_before(&db, "m20261203_000026").await;
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 2);
    db.store.migrate().await.unwrap();
    assert_eq!(
        db.store.audit(10).await.unwrap().len(),
        0,
        "down dropped the audit"
    );
}
