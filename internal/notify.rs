//! New-work wake-ups on PostgreSQL: Feed's writes that add runnable items
//! send `NOTIFY feed_items` in their transaction, and each processor
//! LISTENs and polls at once instead of waiting for the poll interval.
//! Polling stays the safety net: a missed notification (or an insert with
//! plain SQL, which sends none) only costs latency.
//!
//! A LISTEN connection the network dropped silently would wait for
//! notifications forever, so it is pinged once per session expiry; one that
//! does not answer within the statement timeout is replaced.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::{self, postgres::PgListener};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::Config;
use crate::backoff::Backoff;
use crate::store::redact;

/// The channel Feed's writes notify.
pub(crate) const CHANNEL: &str = "feed_items";

/// Listens until `cancel`, reconnecting with backoff.
pub(crate) async fn listen(config: Config, wake: Arc<Notify>, cancel: CancellationToken) {
    let url = config.database.url;
    let limit = config.database.statement_timeout;
    let every = config.leases.session_expiry;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        match tokio::time::timeout(limit, open(&url)).await {
            Ok(Ok(listener)) => {
                backoff.reset();
                let stop = serve(listener, &wake, &cancel, limit, every).await;
                if stop {
                    return;
                }
                // Work may have arrived while the connection was dead.
                wake.notify_one();
            }
            Ok(Err(e)) => {
                let e = e.to_string().replace(&url, &redact(&url));
                tracing::warn!(error = %e, "cannot open a LISTEN connection; polling only");
            }
            Err(_) => {
                tracing::warn!(limit = ?limit, "opening a LISTEN connection timed out; polling only")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = backoff.wait() => {}
        }
    }
}

async fn open(url: &str) -> Result<PgListener, sqlx::Error> {
    // A multi-host URL: the host that takes writes (LISTEN needs the primary).
    let url = crate::store::primary_url(url)
        .await
        .map_err(sqlx::Error::Protocol)?;
    let mut listener = PgListener::connect(&url).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Wakes the dispatch loop on every notification until the connection is
/// lost or stops answering pings (false) or `cancel` (true).
async fn serve(
    mut listener: PgListener,
    wake: &Notify,
    cancel: &CancellationToken,
    limit: Duration,
    every: Duration,
) -> bool {
    let mut ping = tokio::time::interval(every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        // `recv` is cancel-safe: sqlx keeps a partly read message buffered.
        tokio::select! {
            _ = cancel.cancelled() => return true,
            n = listener.recv() => match n {
                Ok(_) => wake.notify_one(),
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN connection lost; polling meanwhile");
                    return false;
                }
            },
            _ = ping.tick() => {
                let check = sqlx::query("SELECT 1").execute(&mut listener);
                match tokio::time::timeout(limit, check).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "LISTEN connection failed a ping; replacing it");
                        return false;
                    }
                    Err(_) => {
                        tracing::warn!(limit = ?limit, "LISTEN connection did not answer a ping; replacing it");
                        return false;
                    }
                }
            }
        }
    }
}
