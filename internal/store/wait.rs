//! `processor wait`: block until a partition is finished (`complete`,
//! `failed` or `cancelled`). On PostgreSQL the `NOTIFY
//! feed_events` sent with a partition's event (`store::outbox`) (payload: the partition id) wakes the wait at once;
//! elsewhere, and as PostgreSQL's safety net, it polls the partition's
//! status every `poll`.

use super::driver::sql;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use serde::Serialize;
use tokio::time::Instant;

use super::events::Counts;
use super::{DEFAULT_STATEMENT_TIMEOUT, Store, get};
use crate::status::Status;
use crate::{Result, validate};

/// The channel a partition's event is notified on, on PostgreSQL.
pub const CHANNEL: &str = "feed_events";

/// How a wait ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Waited {
    /// The partition's status at the end (`available` after a timeout, or
    /// a status written by hand).
    pub status: String,
    /// It finished: `complete`, `failed` or `cancelled`. False: timed out.
    pub finished: bool,
    /// Its items by status at the end.
    pub counts: Counts,
}

impl Store {
    /// Waits until `partition` is finished or `timeout` (None: forever)
    /// has passed, checking at least every `poll`. NotFound for an unknown
    /// partition.
    pub async fn wait(
        &self,
        partition: &str,
        timeout: Option<Duration>,
        poll: Duration,
    ) -> Result<Waited> {
        validate::filter("partition id", partition)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        // Listening starts before the first look, so a finish between the
        // look and the nap still wakes it.
        let mut listener = self.listen_events().await;
        loop {
            let status = self.state(partition).await?.status;
            let finished = matches!(
                Status::parse(&status),
                Some(Status::Complete | Status::Failed | Status::Cancelled)
            );
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if finished || left == Some(Duration::ZERO) {
                let counts = self.partition_counts(partition).await?;
                return Ok(Waited {
                    status,
                    finished,
                    counts,
                });
            }
            let nap = left.map_or(poll, |l| l.min(poll));
            match listener.as_mut() {
                Some(l) => {
                    let _ = tokio::time::timeout(nap, woken(l, partition, nap)).await;
                }
                None => tokio::time::sleep(nap).await,
            }
        }
    }

    /// A LISTEN on the events channel, where the database has LISTEN
    /// (PostgreSQL); None elsewhere or when it cannot be opened (the wait
    /// then polls).
    async fn listen_events(&self) -> Option<PgListener> {
        if !self.driver.has_listen() {
            return None;
        }
        let pool = self.db.get_postgres_connection_pool();
        let opened = async {
            let mut l = PgListener::connect_with(pool).await?;
            l.listen(CHANNEL).await?;
            Ok::<_, sea_orm::sqlx::Error>(l)
        };
        match tokio::time::timeout(DEFAULT_STATEMENT_TIMEOUT, opened).await {
            Ok(Ok(l)) => Some(l),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot LISTEN for events; polling");
                None
            }
            Err(_) => {
                tracing::warn!("opening a LISTEN connection timed out; polling");
                None
            }
        }
    }

    /// A partition's items by status (one index range).
    pub async fn partition_counts(&self, id: &str) -> Result<Counts> {
        let rows = self.fetch(sql!(self.driver;
            "SELECT status, COUNT(*) AS n FROM feed_items WHERE partition_id = " {id} " GROUP BY status"
        ))
            .await?;
        let mut c = Counts::default();
        for r in &rows {
            let n: i64 = get(r, "n")?;
            match Status::parse(&get::<String>(r, "status")?) {
                Some(Status::Available) => c.available += n,
                Some(Status::Complete) => c.complete += n,
                Some(Status::Failed) => c.failed += n,
                Some(Status::Cancelled) => c.cancelled += n,
                None => {}
            }
        }
        Ok(c)
    }
}

/// Returns when a notification names `partition`; after a failed receive
/// it sleeps `nap` rather than retry at once.
async fn woken(l: &mut PgListener, partition: &str, nap: Duration) {
    loop {
        match l.recv().await {
            Ok(n) if n.payload() == partition => return,
            Ok(_) => {}
            Err(_) => return tokio::time::sleep(nap).await,
        }
    }
}
