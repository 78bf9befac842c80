//! Operator controls and retention: `paused` on partitions, the
//! `feed_maintenance` lease row that lets one processor at a time prune, and
//! indexes for the dashboard's listings and the pruner.
//!
//! `cancelled` (partitions and items) is a new status value only: statuses
//! are free text, so it needs no DDL.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// The DDL after the `paused` column, one statement per entry.
fn statements(backend: DbBackend) -> Vec<String> {
    let insert_once = match backend {
        DbBackend::Postgres => {
            "INSERT INTO feed_maintenance (name) VALUES ('retention') ON CONFLICT DO NOTHING"
        }
        DbBackend::MySql => "INSERT IGNORE INTO feed_maintenance (name) VALUES ('retention')",
        _ => "INSERT OR IGNORE INTO feed_maintenance (name) VALUES ('retention')",
    };
    vec![
        "CREATE TABLE IF NOT EXISTS feed_maintenance (
            name VARCHAR(64) NOT NULL PRIMARY KEY,
            holder VARCHAR(64) NULL,
            expires_at BIGINT NOT NULL DEFAULT 0
        )"
        .into(),
        insert_once.into(),
        // The pruner and the partitions page by status, oldest first.
        "CREATE INDEX IF NOT EXISTS feed_partitions_updated ON feed_partitions (status, updated_at)"
            .into(),
        // A partition's items in id order: the items page and the pruner's batches.
        "CREATE INDEX IF NOT EXISTS feed_items_partition_id ON feed_items (partition_id, id)".into(),
        // Items completed per minute over the last hour, on the overview page.
        "CREATE INDEX IF NOT EXISTS feed_items_updated ON feed_items (status, updated_at)".into(),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        crate::add_flag(manager, "feed_partitions", "paused").await?;
        for sql in statements(backend) {
            db.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        db.execute_unprepared("DROP TABLE IF EXISTS feed_maintenance")
            .await?;
        crate::drop_column(manager, "feed_partitions", "paused").await
    }
}
