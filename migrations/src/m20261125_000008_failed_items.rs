//! Failed items get an index of their own, so that a result write maintains
//! one index fewer.
//!
//! `feed_items_updated (status, updated_at)` changed with every result (its
//! `status` and `updated_at` are written each time), and since the overview
//! counts completions in `feed_completions` its only readers are the ones
//! that look for failed items (`status`, the console's failed lists, `retry`).
//! Where the database has partial indexes (PostgreSQL, SQLite) it is
//! replaced by `feed_items_failed (partition_id, id) WHERE status = 'failed'`,
//! which a result that completes an item or schedules a retry never touches.
//! MySQL/MariaDB have no partial indexes and keep `feed_items_updated`.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

const FAILED: &str = "CREATE INDEX IF NOT EXISTS feed_items_failed ON feed_items (partition_id, id) \
                      WHERE status = 'failed'";
const UPDATED: &str =
    "CREATE INDEX IF NOT EXISTS feed_items_updated ON feed_items (status, updated_at)";

/// Runs `statements` where the database has partial indexes; MySQL and
/// MariaDB are left as they are.
async fn apply(manager: &SchemaManager<'_>, statements: [&str; 2]) -> Result<(), DbErr> {
    if manager.get_database_backend() == DbBackend::MySql {
        return Ok(());
    }
    for sql in statements {
        manager.get_connection().execute_unprepared(sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        apply(manager, [FAILED, "DROP INDEX IF EXISTS feed_items_updated"]).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        apply(manager, [UPDATED, "DROP INDEX IF EXISTS feed_items_failed"]).await
    }
}
