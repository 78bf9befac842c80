//! PostgreSQL: the `feed_items_notify` trigger goes. Feed's own writes
//! that add runnable items (enqueue, spawned items, retry) send `NOTIFY
//! feed_items` in their transaction instead: a distributed database
//! (Citus) cannot run triggers on its distributed tables, and one that
//! did would notify on the worker, where no processor listens. Items a
//! producer inserts with plain SQL are found by the next poll. `down`
//! puts the trigger back. A no-op elsewhere.

use crate::m20261121_000002_notify as notify;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        notify::Migration.down(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        notify::Migration.up(manager).await
    }
}
