//! The figures operators watch:
//! - `feed_partitions.gate_at`: when the partition's gate last moved
//!   (epoch ms, database clock; 0 = not since it was created). An item at
//!   the partition's gate became ready when it was written, when its time
//!   came, or when its gate opened, whichever is last: the queue wait and
//!   the age of the oldest ready item are counted from there.
//! - the `backlog` row of `feed_maintenance`: one processor at a time
//!   counts the fleet's backlog.
//! - `feed_completions.retried` and `.failed`: beside the items completed
//!   each minute, the attempts that failed and will be retried and the
//!   items that failed for good, for the throughput figures.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

const COLUMNS: [crate::Column; 3] = [
    ("feed_partitions", "gate_at", "BIGINT NOT NULL DEFAULT 0"),
    ("feed_completions", "retried", "BIGINT NOT NULL DEFAULT 0"),
    ("feed_completions", "failed", "BIGINT NOT NULL DEFAULT 0"),
];

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::m20261202_000025_citus::sequential(manager).await?;
        crate::add_columns(manager, &COLUMNS).await?;
        let insert = match manager.get_database_backend() {
            DbBackend::Postgres => {
                "INSERT INTO feed_maintenance (name) VALUES ('backlog') ON CONFLICT DO NOTHING"
            }
            DbBackend::MySql => "INSERT IGNORE INTO feed_maintenance (name) VALUES ('backlog')",
            _ => "INSERT OR IGNORE INTO feed_maintenance (name) VALUES ('backlog')",
        };
        manager.get_connection().execute_unprepared(insert).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::m20261202_000025_citus::sequential(manager).await?;
        manager
            .get_connection()
            .execute_unprepared("DELETE FROM feed_maintenance WHERE name = 'backlog'")
            .await?;
        crate::drop_columns(manager, &COLUMNS).await
    }
}
