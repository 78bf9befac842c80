//! Flow control toward the handler: tenants, per-partition overrides,
//! per-tenant limits, and the shared state that makes limits hold for the
//! whole fleet.
//!
//! - `feed_partitions.tenant` groups partitions (a customer, an endpoint)
//!   for fairness and limits; `weight` and `max_in_flight` override a
//!   partition's share of dispatch and its in-flight cap.
//! - `feed_limits` holds per-tenant limits, edited live.
//! - `feed_buckets` are rate limits shared by every processor: the
//!   fleet's `--rate-limit` and each tenant's rate. Each row keeps the time
//!   (epoch microseconds) up to which the tokens claimed so far are paid
//!   for; a processor reserves small chunks of tokens by moving it on.
//! - `feed_processors.send_rate` is the rate a processor holds itself to
//!   after the handler answered "too many" (NULL: not held back), written
//!   with its heartbeat so that the console can show it.
//! - `feed_slots` records how many of a tenant's in-flight slots each
//!   session holds and wants, so that their sum never exceeds the
//!   tenant's cap and each session can take its fair share.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

fn tables(backend: DbBackend) -> [String; 3] {
    let real = match backend {
        DbBackend::Postgres => "DOUBLE PRECISION",
        DbBackend::MySql => "DOUBLE",
        _ => "REAL",
    };
    [
        format!(
            "CREATE TABLE IF NOT EXISTS feed_limits (
                tenant VARCHAR(255) NOT NULL PRIMARY KEY,
                max_in_flight INTEGER NULL,
                rate {real} NULL,
                burst INTEGER NULL,
                weight INTEGER NULL,
                updated_at BIGINT NOT NULL DEFAULT 0
            )"
        ),
        "CREATE TABLE IF NOT EXISTS feed_buckets (
            name VARCHAR(255) NOT NULL PRIMARY KEY,
            paid_until BIGINT NOT NULL
        )"
        .into(),
        "CREATE TABLE IF NOT EXISTS feed_slots (
            tenant VARCHAR(255) NOT NULL,
            session_id VARCHAR(64) NOT NULL,
            slots INTEGER NOT NULL,
            wanted INTEGER NOT NULL,
            PRIMARY KEY (tenant, session_id)
        )"
        .into(),
    ]
}

const COLUMNS: [crate::Column; 4] = [
    ("feed_partitions", "tenant", "VARCHAR(255) NULL"),
    ("feed_partitions", "weight", "INTEGER NULL"),
    ("feed_partitions", "max_in_flight", "INTEGER NULL"),
    ("feed_processors", "send_rate", "DOUBLE PRECISION NULL"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for sql in tables(manager.get_database_backend()) {
            manager.get_connection().execute_unprepared(&sql).await?;
        }
        crate::add_columns(manager, &COLUMNS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_columns(manager, &COLUMNS).await?;
        for table in ["feed_slots", "feed_buckets", "feed_limits"] {
            manager
                .get_connection()
                .execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
                .await?;
        }
        Ok(())
    }
}
