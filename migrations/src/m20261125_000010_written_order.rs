//! A partition's items in the order they were written: `feed_items_written
//! (partition_id, seq)` replaces `feed_items_partition_id (partition_id, id)`.
//!
//! `processor export` streams a partition's items in write order, in pages
//! that each start where the last one ended; the console's items page and
//! the pruner, the old index's readers, read in that order too. One index
//! for another, so a result write maintains no more than before. On SQLite
//! an index on `partition_id` alone is in write order: its entries end with
//! the `rowid`, which is SQLite's `seq`.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

fn written(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Sqlite => {
            "CREATE INDEX IF NOT EXISTS feed_items_written ON feed_items (partition_id)"
        }
        _ => "CREATE INDEX IF NOT EXISTS feed_items_written ON feed_items (partition_id, seq)",
    }
}

const BY_ID: &str =
    "CREATE INDEX IF NOT EXISTS feed_items_partition_id ON feed_items (partition_id, id)";

/// `DROP INDEX` for `name` of `feed_items`.
fn drop(backend: DbBackend, name: &str) -> String {
    match backend {
        DbBackend::MySql => format!("DROP INDEX IF EXISTS {name} ON feed_items"),
        _ => format!("DROP INDEX IF EXISTS {name}"),
    }
}

async fn apply(manager: &SchemaManager<'_>, statements: [String; 2]) -> Result<(), DbErr> {
    for sql in statements {
        manager.get_connection().execute_unprepared(&sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let b = manager.get_database_backend();
        apply(
            manager,
            [written(b).into(), drop(b, "feed_items_partition_id")],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let b = manager.get_database_backend();
        apply(manager, [BY_ID.into(), drop(b, "feed_items_written")]).await
    }
}
