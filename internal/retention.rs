//! `run --retention`: prunes finished partitions every few minutes, from
//! one processor at a time. The processors race for the `retention` row of
//! `feed_maintenance` (a fenced lease on the database clock, as River's
//! leader election); the holder renews it each round, and if it dies the
//! lease expires and another processor takes over.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::Session;
use crate::store::Store;

/// How often the holder prunes.
pub(crate) const INTERVAL: Duration = Duration::from_secs(300);
/// How long the lease outlives a round; longer than [`INTERVAL`] so the
/// holder keeps it, short enough that a dead holder is replaced soon.
const LEASE: Duration = Duration::from_secs(600);

/// Prunes partitions finished more than `older_than` ago every
/// [`INTERVAL`] while this processor holds the lease (taken under the
/// current id of `session`), until `cancel`. A round cut short by `cancel`
/// loses nothing: each of its statements is a transaction of its own.
pub(crate) async fn run(
    store: Store,
    session: Arc<Session>,
    older_than: Duration,
    cancel: CancellationToken,
) {
    loop {
        let r = tokio::select! {
            _ = cancel.cancelled() => return,
            r = round(&store, &session, older_than) => r,
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "retention round failed; trying again later");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

async fn round(store: &Store, session: &Session, older_than: Duration) -> crate::Result<()> {
    let me = session.id();
    if !store.lease_maintenance("retention", &me, LEASE).await? {
        tracing::debug!("another processor holds the retention lease");
        return Ok(());
    }
    let pruned = store.prune(older_than, false).await?;
    if pruned.partitions > 0 || pruned.items > 0 || pruned.events > 0 {
        tracing::info!(
            partitions = pruned.partitions,
            items = pruned.items,
            events = pruned.events,
            "pruned finished partitions"
        );
    }
    Ok(())
}
