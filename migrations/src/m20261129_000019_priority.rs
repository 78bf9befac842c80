//! `feed_partitions.priority`: among the partitions that share turns (one
//! tenant's, or those of no tenant), higher ones are served first.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COLUMNS: [crate::Column; 1] = [("feed_partitions", "priority", "INTEGER NOT NULL DEFAULT 0")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::add_columns(manager, &COLUMNS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_columns(manager, &COLUMNS).await
    }
}
