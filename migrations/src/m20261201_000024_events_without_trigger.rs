//! The `feed_partitions_events` trigger goes: Feed's statements write a
//! partition's completion event (and `NOTIFY feed_events` on PostgreSQL)
//! in the transaction that closes, fails or cancels it or moves its gate.
//! A distributed database (Citus) runs no trigger on its distributed
//! tables. A status written with plain SQL writes no event. `down` puts
//! the trigger back (the events migration again: every statement of it is
//! idempotent).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::m20261125_000009_events as events;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared(
                    "DROP TRIGGER IF EXISTS feed_partitions_events ON feed_partitions",
                )
                .await?;
                db.execute_unprepared("DROP FUNCTION IF EXISTS feed_partition_event()")
                    .await?;
            }
            _ => {
                db.execute_unprepared("DROP TRIGGER IF EXISTS feed_partitions_events")
                    .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        events::Migration.up(manager).await
    }
}
