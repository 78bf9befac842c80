//! On PostgreSQL, the two item indexes that only look for work hold open
//! items only, so that a result that completes an item maintains neither:
//!
//! - `feed_items_ready (partition_id, status, gate, seq)` takes `WHERE
//!   status <> 'complete' AND status <> 'cancelled'`: dispatch, gate checks
//!   and leasing only ever look for items that are still open (available,
//!   failed, or a status Feed does not write);
//! - `feed_items_seq (seq)` takes `WHERE status = 'available'`: it serves
//!   the look for items written since the last one, which only wants work.
//!
//! A completion writes a new row version (the status is indexed, so the
//! update is never HOT), and with full indexes every such version took an
//! entry in each that no reader wants; left out, a completion maintains two
//! indexes (the key and the write order) instead of four. PostgreSQL proves
//! that each reader's status test (`= 'available'`, ranges between the
//! known statuses) implies the index's condition. SQLite only matches a
//! condition written out in the query (and has no `seq` index: its
//! `rowid` is the key), and MySQL/MariaDB have no partial indexes, so they
//! keep theirs.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// Each index: its name, its columns, and its condition on PostgreSQL.
const INDEXES: [(&str, &str, &str); 2] = [
    (
        "feed_items_ready",
        "(partition_id, status, gate, seq)",
        "status <> 'complete' AND status <> 'cancelled'",
    ),
    ("feed_items_seq", "(seq)", "status = 'available'"),
];

/// Rebuilds the indexes on PostgreSQL, partial when `partial` (in the
/// migration's transaction); other databases are left as they are.
async fn rebuild(manager: &SchemaManager<'_>, partial: bool) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let db = manager.get_connection();
    for (name, columns, condition) in INDEXES {
        let condition = if partial {
            format!(" WHERE {condition}")
        } else {
            String::new()
        };
        db.execute_unprepared(&format!("DROP INDEX IF EXISTS {name}"))
            .await?;
        db.execute_unprepared(&format!(
            "CREATE INDEX IF NOT EXISTS {name} ON feed_items {columns}{condition}"
        ))
        .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, true).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, false).await
    }
}
