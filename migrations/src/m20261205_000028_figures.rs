//! `feed_processors.figures`: a processor's last five minutes (handler
//! calls, failed calls, latency and queue-wait histograms, deliveries in
//! flight, calls per second), JSON written with each heartbeat, so that
//! the console and the API give the fleet's percentiles and the
//! handler's state from the database alone.

use sea_orm_migration::prelude::*;

const COLUMNS: [crate::Column; 1] = [("feed_processors", "figures", "TEXT NULL")];

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::m20261202_000025_citus::sequential(manager).await?;
        crate::add_columns(manager, &COLUMNS).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::m20261202_000025_citus::sequential(manager).await?;
        crate::drop_columns(manager, &COLUMNS).await
    }
}
