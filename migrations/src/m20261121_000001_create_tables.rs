//! The three tables: partitions, items and processor sessions.
//!
//! Times are integer epoch milliseconds taken from the database's own clock
//! (`now_ms`), so that every comparison uses one clock and compares as numbers
//! on all three backends.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// The database clock in epoch milliseconds, as a column default.
fn now_ms(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "(floor(extract(epoch from clock_timestamp()) * 1000)::bigint)",
        DbBackend::MySql => "(floor(unix_timestamp(now(3)) * 1000))",
        _ => "(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))",
    }
}

/// The DDL for one backend, one statement per entry.
fn statements(backend: DbBackend) -> Vec<String> {
    let now = now_ms(backend);
    let (bool_t, true_v, false_v, bytes_t, text_t) = match backend {
        DbBackend::Postgres => ("BOOLEAN", "TRUE", "FALSE", "BYTEA", "TEXT"),
        DbBackend::MySql => ("BOOLEAN", "TRUE", "FALSE", "LONGBLOB", "TEXT"),
        _ => ("BOOLEAN", "1", "0", "BLOB", "TEXT"),
    };
    // MySQL cannot index unbounded text; ids are bounded everywhere for one contract.
    let id_t = "VARCHAR(255)";
    let mut out = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS feed_processors (
                id VARCHAR(64) NOT NULL PRIMARY KEY,
                hostname VARCHAR(255) NOT NULL DEFAULT '',
                pid BIGINT NOT NULL DEFAULT 0,
                software_version VARCHAR(64) NOT NULL DEFAULT '',
                started_at BIGINT NOT NULL DEFAULT {now},
                heartbeat_at BIGINT NOT NULL DEFAULT {now}
            )"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS feed_partitions (
                id {id_t} NOT NULL PRIMARY KEY,
                status VARCHAR(16) NOT NULL DEFAULT 'available',
                gate BIGINT NOT NULL DEFAULT 0,
                owner VARCHAR(64) NULL,
                auto_close {bool_t} NOT NULL DEFAULT {true_v},
                manual_checkpoint {bool_t} NOT NULL DEFAULT {false_v},
                on_failure VARCHAR(16) NOT NULL DEFAULT 'block',
                version BIGINT NOT NULL DEFAULT 0,
                created_at BIGINT NOT NULL DEFAULT {now},
                updated_at BIGINT NOT NULL DEFAULT {now}
            )"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS feed_items (
                id {id_t} NOT NULL PRIMARY KEY,
                partition_id {id_t} NOT NULL REFERENCES feed_partitions (id),
                gate BIGINT NOT NULL DEFAULT 0,
                status VARCHAR(16) NOT NULL DEFAULT 'available',
                data {bytes_t} NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error {text_t} NULL,
                not_before BIGINT NULL,
                version BIGINT NOT NULL DEFAULT 0,
                created_at BIGINT NOT NULL DEFAULT {now},
                updated_at BIGINT NOT NULL DEFAULT {now}
            )"
        ),
    ];
    let indexes = [
        // Serves the dispatch query: a held partition's available items at its gate.
        (
            "feed_items_dispatch",
            "feed_items (partition_id, status, gate)",
        ),
        // Serves leasing and balancing: active partitions by owner.
        ("feed_partitions_owner", "feed_partitions (status, owner)"),
    ];
    for (name, on) in indexes {
        // MariaDB, PostgreSQL and SQLite all accept IF NOT EXISTS here.
        out.push(format!("CREATE INDEX IF NOT EXISTS {name} ON {on}"));
    }
    out
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in statements(manager.get_database_backend()) {
            db.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for table in ["feed_items", "feed_partitions", "feed_processors"] {
            db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
                .await?;
        }
        Ok(())
    }
}
