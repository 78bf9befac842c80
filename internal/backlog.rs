//! The backlog gauges (`feed_backlog_*`): one processor at a time sets
//! them from the fleet's backlog by tenant every [`INTERVAL`], so that an
//! autoscaler reading any processor's metrics sums to the fleet's figure
//! once. The processors race for the `backlog` row of `feed_maintenance`
//! (a lease on the database clock, as retention's); the others export no
//! backlog series. The count is the store's recent one
//! ([`Store::recent_backlog`]), shared with the console and the API of the
//! same process and counted again only as often as its cost allows.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::Session;
use crate::metrics::Metrics;
use crate::store::Store;

/// How often the holder sets the gauges.
const INTERVAL: Duration = Duration::from_secs(15);
/// How long the lease lasts: the holder renews it every [`INTERVAL`], and
/// a dead holder is replaced within this.
const LEASE: Duration = Duration::from_secs(45);

/// Sets the backlog gauges while this processor holds the lease, until
/// `cancel`.
pub(crate) async fn run(
    store: Store,
    session: Arc<Session>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    loop {
        let r = tokio::select! {
            _ = cancel.cancelled() => return,
            r = count(&store, &session, &metrics) => r,
        };
        if let Err(e) = r {
            clear(&metrics);
            tracing::warn!(error = %e, "counting the backlog failed; trying again later");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

/// Sets the gauges, when the lease is this processor's.
async fn count(store: &Store, session: &Session, metrics: &Metrics) -> crate::Result<()> {
    let me = session.id();
    if !store.lease_maintenance("backlog", &me, LEASE).await? {
        clear(metrics);
        return Ok(());
    }
    let backlog = store.recent_backlog().await?;
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
    Ok(())
}

/// Removes the backlog series: a processor that does not count exports
/// none rather than stale or zero figures.
fn clear(metrics: &Metrics) {
    metrics.backlog_ready.clear();
    metrics.backlog_scheduled.clear();
    metrics.backlog_retrying.clear();
    metrics.backlog_oldest.clear();
}
