//! `feed_schedules`: recurring partitions. Each row is a cron expression
//! in a time zone, the settings of the partitions it creates (`spec`, as
//! JSON), their items (`items`, JSON lines) and how many missed ticks to
//! create at most (`backfill`); `next_tick` is the next tick to create
//! (epoch ms), `last_partition` and `last_error` what the last one did.
//! The name is compared byte for byte on MariaDB too.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

const TABLE: &str = "CREATE TABLE IF NOT EXISTS feed_schedules (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    cron VARCHAR(255) NOT NULL,
    timezone VARCHAR(64) NOT NULL,
    spec TEXT NOT NULL,
    items {TEXT} NOT NULL,
    backfill INTEGER NOT NULL DEFAULT 1,
    next_tick BIGINT NOT NULL,
    last_partition VARCHAR(255) NULL,
    last_error TEXT NULL,
    created_at BIGINT NOT NULL DEFAULT 0,
    updated_at BIGINT NOT NULL DEFAULT 0
)";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let mysql = manager.get_database_backend() == DbBackend::MySql;
        // MySQL's TEXT holds 64 KiB; a template of items may be larger.
        let text = if mysql { "LONGTEXT" } else { "TEXT" };
        db.execute_unprepared(&TABLE.replace("{TEXT}", text))
            .await?;
        if mysql {
            let binary = crate::m20261129_000018_binary_ids::binary(db).await?;
            db.execute_unprepared(&format!(
                "ALTER TABLE feed_schedules MODIFY name VARCHAR(255) NOT NULL COLLATE {binary}"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP TABLE IF EXISTS feed_schedules")
            .await?;
        Ok(())
    }
}
