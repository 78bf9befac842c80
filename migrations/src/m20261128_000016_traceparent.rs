//! `feed_items.traceparent`: the producer's W3C trace context (version 00,
//! 55 characters), NULL when it gave none. The delivery's span is its
//! child, so a trace that enqueued the item goes on through the handler.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COLUMNS: [crate::Column; 1] = [("feed_items", "traceparent", "VARCHAR(55) NULL")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::add_columns(manager, &COLUMNS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_columns(manager, &COLUMNS).await
    }
}
