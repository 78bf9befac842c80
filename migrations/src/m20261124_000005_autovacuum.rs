//! PostgreSQL only: autovacuum and fill settings for the two hot tables, so
//! that a long drain does not slow down as dead row versions pile up.
//!
//! Every item is written several times (leased, attempted, finished) and
//! every write of a partition bumps its version, so both tables make dead
//! row versions at the rate work is done. At the defaults (vacuum after 20 %
//! of a table is dead, analyze after 10 %, vacuum paced at 2 ms per 200 page
//! costs) a table of a million items is not vacuumed until 200,000 dead
//! versions have built up in its heap and in the ready index that dispatch
//! scans, and the planner's statistics lag the moving status mix.
//!
//! - `autovacuum_vacuum_scale_factor = 0.01`: vacuum after 1 % (plus the
//!   default 50 rows) is dead: a 1,000,000-item table at 10,000 dead rows,
//!   not 200,000, so each vacuum is small and the ready index stays dense.
//! - `autovacuum_vacuum_insert_scale_factor = 0.01` (items; PostgreSQL 13
//!   and later, and Feed's triggers already need 14): a backlog that
//!   was only inserted is vacuumed early too, which sets the visibility map
//!   (index-only scans of the item indexes) and freezes rows in small
//!   steps instead of one large anti-wraparound vacuum later.
//! - `autovacuum_analyze_scale_factor = 0.02`: statistics follow the status
//!   mix as a drain turns `available` into `complete`, so the planner keeps
//!   choosing the index paths; analyze samples a fixed number of rows, so
//!   running it more often is cheap.
//! - `autovacuum_vacuum_cost_delay = 0`: these small, frequent vacuums run
//!   unthrottled and finish before the next batch of dead rows arrives; a
//!   throttled vacuum on a hot table falls behind. Other tables keep the
//!   server's pacing.
//! - `fillfactor`: pages keep free room so that a new row version usually
//!   lands on the same page as the old one (fewer pages dirtied, and a
//!   HOT update, with no new index entries, whenever no indexed column
//!   changed). 90 for items, written a few times each and mostly inserted;
//!   80 for partitions, far fewer rows written many times each. It applies
//!   to pages written from now on; existing pages keep their fill.
//!
//! The settings take a SHARE UPDATE EXCLUSIVE lock only (reads and writes go
//! on) and are idempotent, so processors starting together may all apply
//! them. `down` restores the server defaults. SQLite has no vacuum daemon and
//! InnoDB purges old row versions by itself: nothing to do there.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

/// (table, storage parameters) set by `up`.
const SETTINGS: [(&str, &str); 2] = [
    (
        "feed_items",
        "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01, \
         autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0, fillfactor = 90",
    ),
    (
        "feed_partitions",
        "autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, \
         autovacuum_vacuum_cost_delay = 0, fillfactor = 80",
    ),
];

/// `a = 1, b = 2` → `a, b`, for RESET.
fn names(settings: &str) -> String {
    settings
        .split(',')
        .filter_map(|s| s.split('=').next())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `alter(table, settings)` for each table, on PostgreSQL only.
async fn alter_each(
    manager: &SchemaManager<'_>,
    alter: impl Fn(&str, &str) -> String,
) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    for (table, settings) in SETTINGS {
        manager
            .get_connection()
            .execute_unprepared(&alter(table, settings))
            .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_each(manager, |table, settings| {
            format!("ALTER TABLE {table} SET ({settings})")
        })
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        alter_each(manager, |table, settings| {
            format!("ALTER TABLE {table} RESET ({})", names(settings))
        })
        .await
    }
}
