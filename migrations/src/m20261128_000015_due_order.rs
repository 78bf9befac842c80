//! The dispatch index gains `not_before` before the write order:
//! `(partition_id, status, gate, not_before, seq)` (SQLite's
//! `feed_items_dispatch` ends with `not_before`, then its `rowid`).
//!
//! A gate's items that may run now are then two ranges of one index: those
//! without a time (`not_before IS NULL`), in write order, and those whose
//! time has come (`not_before <= now`), in the order they come due. Keyed
//! by write order alone, finding either meant reading past every item
//! scheduled for later: 100,000 items scheduled an hour ahead cost 100,000
//! index entries and rows per probe, on every sweep and every refill. A
//! completion or an insert maintains the same entries as before; an entry
//! grows by the time.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// PostgreSQL's index holds open items only (see `open_items`).
const OPEN: &str = "WHERE status <> 'complete' AND status <> 'cancelled'";

/// The statements that give the dispatch index `columns`, per backend.
fn rebuild(backend: DbBackend, columns: &str) -> Vec<String> {
    match backend {
        DbBackend::Postgres => vec![
            "DROP INDEX IF EXISTS feed_items_ready".into(),
            format!("CREATE INDEX IF NOT EXISTS feed_items_ready ON feed_items {columns} {OPEN}"),
        ],
        // One statement: the table is never without its dispatch index.
        DbBackend::MySql => vec![format!(
            "ALTER TABLE feed_items DROP INDEX IF EXISTS feed_items_ready, \
             ADD INDEX feed_items_ready {columns}"
        )],
        _ => vec![
            "DROP INDEX IF EXISTS feed_items_dispatch".into(),
            format!(
                "CREATE INDEX IF NOT EXISTS feed_items_dispatch ON feed_items {}",
                columns.replace(", seq)", ")")
            ),
        ],
    }
}

async fn run(manager: &SchemaManager<'_>, columns: &str) -> Result<(), DbErr> {
    let db = manager.get_connection();
    for sql in rebuild(manager.get_database_backend(), columns) {
        db.execute_unprepared(&sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run(manager, "(partition_id, status, gate, not_before, seq)").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run(manager, "(partition_id, status, gate, seq)").await
    }
}
