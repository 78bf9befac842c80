//! `feed_items.steps`: how many times in a row the handler answered
//! "not done" for the item at its current gate. It bounds the steps an
//! item may take at one gate (`--max-steps`) and spaces them out, so no
//! answer can make dispatch loop on an item; a move to a later gate, and
//! `processor retry`, start it again at 0.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COLUMNS: [crate::Column; 1] = [("feed_items", "steps", "INTEGER NOT NULL DEFAULT 0")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::add_columns(manager, &COLUMNS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_columns(manager, &COLUMNS).await
    }
}
