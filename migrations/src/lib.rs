//! Feed's schema, as sea-orm migrations.
//!
//! The tables are a public contract (producers write rows with plain SQL), so
//! the DDL is written out per backend rather than generated: the column types
//! and defaults are exactly what the book documents. Every statement is
//! idempotent (`IF NOT EXISTS`) so that processors starting at the same moment
//! on an empty database can all apply it.

#![deny(unreachable_pub)]

pub use sea_orm_migration::prelude::*;

mod m20261121_000001_create_tables;
mod m20261121_000002_notify;
mod m20261123_000003_fair_order;
mod m20261123_000004_controls;
mod m20261124_000005_autovacuum;
mod m20261124_000006_scale;
mod m20261124_000007_completions;
mod m20261125_000008_failed_items;
mod m20261125_000009_events;
mod m20261125_000010_written_order;
mod m20261126_000011_flow_control;
mod m20261126_000012_open_items;
mod m20261127_000013_held;
mod m20261127_000014_producer_tokens;
mod m20261128_000015_due_order;
mod m20261128_000016_traceparent;
mod m20261129_000017_steps;
mod m20261129_000018_binary_ids;
mod m20261129_000019_priority;
mod m20261130_000020_parents;
mod m20261130_000021_schedules;
mod m20261201_000022_item_keys;
mod m20261201_000023_wake_without_trigger;
mod m20261201_000024_events_without_trigger;
mod m20261202_000025_citus;
mod m20261203_000026_gate_at;
mod m20261203_000027_audit;
mod m20261205_000028_figures;

/// Feed on Citus: which tables it distributes, and the step that does it.
pub mod citus {
    pub use crate::m20261202_000025_citus::{distribute, tables};
}

/// Whether `table` has `column`: SQLite and MySQL have no `ADD COLUMN IF
/// NOT EXISTS`, so a migration that adds one looks first (a racing
/// processor that adds it in between makes the `ALTER` fail, and `migrate`
/// retries).
pub(crate) async fn has_column(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
) -> Result<bool, DbErr> {
    use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
    let backend = manager.get_database_backend();
    let sql = match backend {
        DbBackend::Sqlite => "SELECT COUNT(*) AS n FROM pragma_table_info(?) WHERE name = ?",
        DbBackend::Postgres => {
            "SELECT COUNT(*) AS n FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
        }
        _ => {
            "SELECT COUNT(*) AS n FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?"
        }
    };
    let values: Vec<Value> = vec![table.into(), column.into()];
    let row = manager
        .get_connection()
        .query_one_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?;
    let n: i64 = row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
    Ok(n > 0)
}

/// Adds `column BOOLEAN NOT NULL DEFAULT false` to `table` unless it is
/// there.
pub(crate) async fn add_flag(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
) -> Result<(), DbErr> {
    use sea_orm_migration::sea_orm::DbBackend;
    let false_v = match manager.get_database_backend() {
        DbBackend::Sqlite => "0",
        _ => "FALSE",
    };
    add_column(
        manager,
        table,
        column,
        &format!("BOOLEAN NOT NULL DEFAULT {false_v}"),
    )
    .await
}

/// Adds `column` of type `definition` (e.g. `INTEGER NULL`) to `table`
/// unless it is there.
pub(crate) async fn add_column(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
    definition: &str,
) -> Result<(), DbErr> {
    use sea_orm_migration::sea_orm::ConnectionTrait;
    if has_column(manager, table, column).await? {
        return Ok(());
    }
    manager
        .get_connection()
        .execute_unprepared(&format!(
            "ALTER TABLE {table} ADD COLUMN {column} {definition}"
        ))
        .await?;
    Ok(())
}

/// A column a migration adds: (table, column, definition).
pub(crate) type Column = (&'static str, &'static str, &'static str);

/// A migration that only adds `columns` (and drops them on the way down).
macro_rules! columns_migration {
    ($columns:expr) => {
        use sea_orm_migration::prelude::*;

        #[derive(DeriveMigrationName)]
        pub(crate) struct Migration;

        #[async_trait::async_trait]
        impl MigrationTrait for Migration {
            async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                crate::add_columns(manager, &$columns).await
            }

            async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                crate::drop_columns(manager, &$columns).await
            }
        }
    };
}
pub(crate) use columns_migration;

/// Adds each of `columns` that is not there.
pub(crate) async fn add_columns(
    manager: &SchemaManager<'_>,
    columns: &[Column],
) -> Result<(), DbErr> {
    for (table, column, definition) in columns {
        add_column(manager, table, column, definition).await?;
    }
    Ok(())
}

/// Drops each of `columns` that is there.
pub(crate) async fn drop_columns(
    manager: &SchemaManager<'_>,
    columns: &[Column],
) -> Result<(), DbErr> {
    for (table, column, _) in columns {
        drop_column(manager, table, column).await?;
    }
    Ok(())
}

/// Drops `column` from `table` if it is there.
pub(crate) async fn drop_column(
    manager: &SchemaManager<'_>,
    table: &str,
    column: &str,
) -> Result<(), DbErr> {
    use sea_orm_migration::sea_orm::ConnectionTrait;
    if has_column(manager, table, column).await? {
        let dropped = manager
            .get_connection()
            .execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN {column}"))
            .await;
        // Gone meanwhile (seen once on SQLite under load: the column was
        // listed, then not there to drop): what was asked for.
        if let Err(e) = dropped
            && has_column(manager, table, column).await?
        {
            return Err(e);
        }
    }
    Ok(())
}

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
            Box::new(m20261125_000009_events::Migration),
            Box::new(m20261125_000010_written_order::Migration),
            Box::new(m20261126_000011_flow_control::Migration),
            Box::new(m20261126_000012_open_items::Migration),
            Box::new(m20261127_000013_held::Migration),
            Box::new(m20261127_000014_producer_tokens::Migration),
            Box::new(m20261128_000015_due_order::Migration),
            Box::new(m20261128_000016_traceparent::Migration),
            Box::new(m20261129_000017_steps::Migration),
            Box::new(m20261129_000018_binary_ids::Migration),
            Box::new(m20261129_000019_priority::Migration),
            Box::new(m20261130_000020_parents::Migration),
            Box::new(m20261130_000021_schedules::Migration),
            Box::new(m20261201_000022_item_keys::Migration),
            Box::new(m20261201_000023_wake_without_trigger::Migration),
            Box::new(m20261201_000024_events_without_trigger::Migration),
            Box::new(m20261202_000025_citus::Migration),
            Box::new(m20261203_000026_gate_at::Migration),
            Box::new(m20261203_000027_audit::Migration),
            Box::new(m20261205_000028_figures::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        "feed_migrations".into_iden()
    }
}
