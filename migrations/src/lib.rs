//! Feed's schema, as sea-orm migrations.
//!
//! The tables are a public contract (producers write rows with plain SQL), so
//! the DDL is written out per backend rather than generated: the column types
//! and defaults are exactly what README documents. Every statement is
//! idempotent (`IF NOT EXISTS`) so that processors starting at the same moment
//! on an empty database can all apply it.

pub use sea_orm_migration::prelude::*;

mod m20261121_000001_create_tables;
mod m20261121_000002_notify;
mod m20261123_000003_fair_order;
mod m20261123_000004_controls;
mod m20261124_000005_autovacuum;
mod m20261124_000006_scale;
mod m20261124_000007_completions;
mod m20261125_000008_failed_items;

/// Applies Feed's migrations in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261121_000001_create_tables::Migration),
            Box::new(m20261121_000002_notify::Migration),
            Box::new(m20261123_000003_fair_order::Migration),
            Box::new(m20261123_000004_controls::Migration),
            Box::new(m20261124_000005_autovacuum::Migration),
            Box::new(m20261124_000006_scale::Migration),
            Box::new(m20261124_000007_completions::Migration),
            Box::new(m20261125_000008_failed_items::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        "feed_migrations".into_iden()
    }
}
