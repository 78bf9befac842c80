//! PostgreSQL only: `NOTIFY feed_items` after every insert into
//! `feed_items`, so processors start new work at once instead of at their
//! next poll. One notification per statement, not per row.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION feed_notify_items() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_notify('feed_items', ''); RETURN NULL; END $$",
        )
        .await?;
        db.execute_unprepared(
            "CREATE OR REPLACE TRIGGER feed_items_notify AFTER INSERT ON feed_items \
             FOR EACH STATEMENT EXECUTE FUNCTION feed_notify_items()",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared("DROP TRIGGER IF EXISTS feed_items_notify ON feed_items")
            .await?;
        db.execute_unprepared("DROP FUNCTION IF EXISTS feed_notify_items()")
            .await?;
        Ok(())
    }
}
