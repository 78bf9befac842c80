//! Reaching the database at start: connect and migrate (waiting while it
//! is unreachable), then register the session (waiting while it does not
//! answer), each retried with backoff and cut short by shutdown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::ids::SessionId;
use crate::metrics::Metrics;
use crate::server::Health;
use crate::session;
use crate::store::{Store, shown};
use crate::{Config, Error, Result};

/// Connects (waiting for the database), counts statements into `metrics`
/// and migrates when asked; None when shutdown came first.
pub(super) async fn open(
    config: &Config,
    metrics: &Metrics,
    health: &Health,
    cancel: &CancellationToken,
) -> Result<Option<Store>> {
    let Some(mut store) = connect(config, cancel).await? else {
        return Ok(None);
    };
    store.set_statement_counter(metrics.statements.clone());
    store.set_timeout_counter(metrics.statement_timeouts.clone());
    health.database.store(true, Ordering::Relaxed);
    if config.database.migrate {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            r = store.migrate() => r?,
        }
    }
    health.schema.store(true, Ordering::Relaxed);
    Ok(Some(store))
}

/// Registers the session, retrying with backoff while the database does not
/// answer; false when shutdown came first. Other errors (no schema, say)
/// are returned: retrying would not help.
pub(super) async fn register(
    store: &Store,
    config: &Config,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Result<bool> {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        let delay = backoff.next_delay();
        match session::register(store, config, id).await {
            Ok(()) => return Ok(true),
            Err(e @ Error::StatementTimeout(_)) => {
                tracing::warn!(session = %id, error = %e, retry_in = ?delay, "the database does not answer; retrying the registration")
            }
            Err(Error::Db(e)) if crate::store::is_transient(&e) => {
                tracing::warn!(session = %id, error = %e, retry_in = ?delay, "cannot register the session; retrying")
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(false),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// The store's settings from the processor's.
fn store_options(config: &Config, pool: u32) -> crate::store::Options {
    let mut o = crate::store::Options::new(pool);
    o.statement_timeout = config.database.statement_timeout;
    o.max_lifetime = config.database.max_lifetime;
    o.pooler = config.database.pooler;
    o.clock = config.database.clock;
    o
}

/// Connects, retrying with backoff (so logging at most one line per
/// retry, 30 s apart at the longest) while the database is unreachable;
/// None when shutdown came first. A database that cannot be used as the
/// URL says (`store::Unusable`: no such database, a refused login, an
/// SQLite file that cannot be opened) or a bad URL fails at once.
async fn connect(config: &Config, cancel: &CancellationToken) -> Result<Option<Store>> {
    let pool = u32::try_from(config.handler.concurrency / 4 + 4)
        .unwrap_or(32)
        .min(32);
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let delay = backoff.next_delay();
        tracing::debug!(database = %shown(&config.database.url), "connecting to the database");
        let options = store_options(config, pool);
        let attempt = Store::open(&config.database.url, &options);
        let result = tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            r = attempt => r,
        };
        match result {
            Ok(store) => return Ok(Some(store)),
            Err(Error::Connect { url, reason }) => {
                tracing::warn!(database = %url, error = %reason, retry_in = ?delay, "database unreachable; retrying");
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
