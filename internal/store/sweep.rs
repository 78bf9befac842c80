//! Connections left for dead in the pool after a cut-off.
//!
//! When a statement is cut off (see `timeout`), the fault that cut it (a
//! partition, a failover to a new address, a firewall that forgot the
//! flows) most likely took the connections idle in the pool at that moment
//! too, and each would cost whoever takes it next a whole statement timeout
//! to find out: a heartbeat that met two in a row would outlive its
//! session. So a cut-off starts one sweep: every idle connection is taken
//! out and pinged, all at once, within the limit. One that answers goes
//! back to the pool; one that does not is dropped without a close, because
//! a close waits on the silent peer (sqlx's TLS shutdown reads), and the
//! pool opens a fresh one in its place when one is needed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sea_orm::sqlx::{self, Connection};

use super::timeout::Bound;
use super::{Driver, Store};

impl Store {
    /// Starts a sweep of the idle connections unless one is under way. It
    /// ends within the statement timeout (every ping is bounded), so the
    /// cut-off statement's caller does not wait for it.
    pub(super) fn sweep_idle(&self) {
        if *self.driver == Driver::Sqlite || self.bound.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let bound = self.bound.clone();
        if *self.driver == Driver::MySql {
            start(self.db.get_mysql_connection_pool().clone(), bound);
        } else {
            start(self.db.get_postgres_connection_pool().clone(), bound);
        }
    }
}

/// Takes every idle connection of `pool` out at once (before the
/// cut-off statement's retry can take one), then pings them all in a task
/// of its own, each within the limit, and lets the next sweep start.
fn start<DB: sqlx::Database>(pool: sqlx::Pool<DB>, bound: Arc<Bound>) {
    let mut idle = Vec::new();
    while let Some(conn) = pool.try_acquire() {
        idle.push(conn);
    }
    tokio::spawn(async move {
        let pings = idle.into_iter().map(|mut conn| async {
            match tokio::time::timeout(bound.limit, conn.ping()).await {
                Ok(Ok(())) => 0,
                _ => {
                    drop(conn.detach());
                    1
                }
            }
        });
        let dropped: usize = futures_util::future::join_all(pings)
            .await
            .into_iter()
            .sum();
        if dropped > 0 {
            tracing::debug!(
                dropped,
                "idle connections did not answer a ping after a cut-off; dropped"
            );
        }
        bound.sweeping.store(false, Ordering::Release);
    });
}
