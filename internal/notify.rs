//! New-work wake-ups on PostgreSQL: a trigger on `feed_items` sends
//! `NOTIFY feed_items` for every insert (so plain-SQL producers wake
//! processors too), and each processor LISTENs and polls at once instead of
//! waiting for the poll interval. Polling stays the safety net: a missed
//! notification only costs latency.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::store::redact;

/// The channel the migration's trigger notifies.
pub const CHANNEL: &str = "feed_items";

/// Listens in the background until `cancel`, reconnecting with backoff.
pub fn listen(url: String, wake: Arc<Notify>, cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(500);
        loop {
            match PgListener::connect(&url).await {
                Ok(mut listener) => match listener.listen(CHANNEL).await {
                    Ok(()) => {
                        delay = Duration::from_millis(500);
                        loop {
                            tokio::select! {
                                _ = cancel.cancelled() => return,
                                n = listener.recv() => match n {
                                    Ok(_) => wake.notify_one(),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "LISTEN connection lost; polling meanwhile");
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "LISTEN failed; polling only"),
                },
                Err(e) => {
                    let e = e.to_string().replace(&url, &redact(&url));
                    tracing::warn!(error = %e, "cannot open a LISTEN connection; polling only");
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    });
}
