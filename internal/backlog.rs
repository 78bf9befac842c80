//! The backlog gauges (`feed_backlog_*`): one processor at a time counts
//! the fleet's backlog by tenant every [`INTERVAL`] (less often when one
//! count takes long: it waits 20 times its own duration), so that an autoscaler reading any
//! processor's metrics sums to the fleet's figure once. The processors
//! race for the `backlog` row of `feed_maintenance` (a lease on the
//! database clock, as retention's); the others export no backlog series.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::context::Session;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::store::backlog::SPACING;

/// How often the holder counts, at most.
const INTERVAL: Duration = Duration::from_secs(15);
/// How long the lease outlives the wait before the next count: a dead
/// holder is replaced within that.
const LEASE: Duration = Duration::from_secs(30);

/// Counts the backlog while this processor holds the lease, until
/// `cancel`.
pub(crate) async fn run(
    store: Store,
    session: Arc<Session>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    loop {
        let began = Instant::now();
        let counted = tokio::select! {
            _ = cancel.cancelled() => return,
            r = count(&store, &session, &metrics) => r,
        };
        let wait = INTERVAL.max(began.elapsed() * SPACING);
        let kept = match counted {
            // The lease outlives the wait, so that no other processor
            // counts meanwhile (a sum over processors counts once).
            Ok(true) => store
                .lease_maintenance("backlog", &session.id(), wait + LEASE)
                .await
                .map(drop),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = kept {
            clear(&metrics);
            tracing::warn!(error = %e, "counting the backlog failed; trying again later");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One count, when the lease is this processor's (true: it counted).
async fn count(store: &Store, session: &Session, metrics: &Metrics) -> crate::Result<bool> {
    let me = session.id();
    if !store.lease_maintenance("backlog", &me, LEASE).await? {
        clear(metrics);
        return Ok(false);
    }
    let backlog = store.backlog().await?;
    clear(metrics);
    for t in &backlog {
        let label = metrics.tenants.label(t.tenant.as_deref());
        // Tenants past the cap share "other": their figures add up, and
        // the oldest is the oldest of them.
        metrics.backlog_ready.get_or_create(&label).inc_by(t.ready);
        metrics
            .backlog_scheduled
            .get_or_create(&label)
            .inc_by(t.scheduled);
        metrics
            .backlog_retrying
            .get_or_create(&label)
            .inc_by(t.retrying);
        let oldest = metrics.backlog_oldest.get_or_create(&label);
        let age = t.oldest_ready_ms.unwrap_or(0).max(0) as f64 / 1000.0;
        if age > oldest.get() {
            oldest.set(age);
        }
    }
    Ok(true)
}

/// Removes the backlog series: a processor that does not count exports
/// none rather than stale or zero figures.
fn clear(metrics: &Metrics) {
    metrics.backlog_ready.clear();
    metrics.backlog_scheduled.clear();
    metrics.backlog_retrying.clear();
    metrics.backlog_oldest.clear();
}
