//! `feed_producer_tokens`: the producer tokens of the enqueue API, each
//! bound to a tenant (and optionally an id prefix, and caps on the weight
//! and max in flight it may give a partition). Only a SHA-256 hash of each
//! token is stored; the token itself is shown once, when it is created.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

const TABLE: &str = "CREATE TABLE IF NOT EXISTS feed_producer_tokens (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    token_hash CHAR(64) NOT NULL UNIQUE,
    tenant VARCHAR(255) NOT NULL,
    prefix VARCHAR(255) NULL,
    max_weight INTEGER NULL,
    max_in_flight INTEGER NULL,
    created_at BIGINT NOT NULL DEFAULT 0
)";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(TABLE).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE IF EXISTS feed_producer_tokens")
            .await?;
        Ok(())
    }
}
