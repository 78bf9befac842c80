//! The autovacuum migration: PostgreSQL's per-table storage settings are
//! set by `up` and restored to the server defaults by `down`; the other
//! backends are untouched.

use migration::{Migrator, MigratorTrait};
use sea_orm::DbBackend;

use crate::on_all_backends;
use crate::support::TestDb;

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
    let conn = db.store.connection();
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
    // Down past it (the two migrations after it, then it) and up again,
    // on every backend.
    Migrator::down(conn, Some(3)).await.unwrap();
    if postgres {
        assert!(options(&db, "feed_items").await.is_empty());
        assert!(options(&db, "feed_partitions").await.is_empty());
    }
    db.store.migrate().await.unwrap();
    if postgres {
        assert_eq!(options(&db, "feed_partitions").await.len(), 4);
    }
}
