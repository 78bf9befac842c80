//! Items completed per minute, counted as results are written, for the
//! overview's chart.
//!
//! The chart counted `feed_items` rows completed in the last hour: a read
//! that grows with the throughput (millions of rows at a few thousand items
//! a second). Processors now add each batch's completed items to the row of
//! the current minute (by the database clock) of `feed_completions`, and the
//! chart reads 60 rows.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE TABLE IF NOT EXISTS feed_completions (\
                 minute BIGINT NOT NULL PRIMARY KEY, items BIGINT NOT NULL DEFAULT 0)",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE IF EXISTS feed_completions")
            .await?;
        Ok(())
    }
}
