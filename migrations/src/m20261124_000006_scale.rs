//! Indexes that keep periodic statements bounded however much work there is.
//!
//! - `feed_partitions_held (status, owner, id)` replaces
//!   `feed_partitions_owner (status, owner)`: a processor reads its held
//!   partitions, and the sweep over `complete` ones reads them, in slices in
//!   id order, each slice one index range (MySQL/MariaDB appended the
//!   primary key already; PostgreSQL and SQLite did not).
//! - `feed_items_seq (seq)`, PostgreSQL only: the dispatch loop finds the
//!   items written since its last look by `seq`, an index range of just
//!   those rows (MySQL/MariaDB's `seq` is `UNIQUE`, and SQLite's is the
//!   `rowid`: both are indexed already).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

fn statements(backend: DbBackend) -> Vec<&'static str> {
    let held =
        "CREATE INDEX IF NOT EXISTS feed_partitions_held ON feed_partitions (status, owner, id)";
    match backend {
        DbBackend::Postgres => vec![
            held,
            "DROP INDEX IF EXISTS feed_partitions_owner",
            "CREATE INDEX IF NOT EXISTS feed_items_seq ON feed_items (seq)",
        ],
        DbBackend::MySql => vec![
            held,
            "DROP INDEX IF EXISTS feed_partitions_owner ON feed_partitions",
        ],
        _ => vec![held, "DROP INDEX IF EXISTS feed_partitions_owner"],
    }
}

fn undo(backend: DbBackend) -> Vec<&'static str> {
    let owner =
        "CREATE INDEX IF NOT EXISTS feed_partitions_owner ON feed_partitions (status, owner)";
    match backend {
        DbBackend::Postgres => vec![
            owner,
            "DROP INDEX IF EXISTS feed_partitions_held",
            "DROP INDEX IF EXISTS feed_items_seq",
        ],
        DbBackend::MySql => vec![
            owner,
            "DROP INDEX IF EXISTS feed_partitions_held ON feed_partitions",
        ],
        _ => vec![owner, "DROP INDEX IF EXISTS feed_partitions_held"],
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in statements(manager.get_database_backend()) {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for sql in undo(manager.get_database_backend()) {
            db.execute_unprepared(sql).await?;
        }
        Ok(())
    }
}
