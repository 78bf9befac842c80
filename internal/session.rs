//! The processor's session: one row in `feed_processors`, heartbeated.
//!
//! Every lease hangs off this one row, so holding many partitions costs one
//! heartbeat write. When the row is found gone the session is dead and every
//! lease with it: a new session is registered and work starts over. When
//! heartbeats fail for longer than the expiry, the processor stops
//! acknowledging on its own (its monotonic clock is enough for that).
//!
//! A heartbeat is given half the expiry: one stuck on a dead connection is
//! abandoned and the next one, on a fresh connection, still lands before
//! the session expires.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::Context;

/// A new session id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Registers a session row (transient failures are retried), within half the expiry.
pub async fn register(shared: &Context, id: &str) -> crate::Result<()> {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let store = &shared.store;
    store
        .within(
            beat_limit(&shared.config),
            store.register_session(id, &host, std::process::id(), shared.config.max_partitions),
        )
        .await
}

/// How long one heartbeat (or registration) may take: half the expiry, so
/// that after one is abandoned another still fits in before the session
/// expires, and never more than the statement timeout.
fn beat_limit(config: &crate::Config) -> Duration {
    (config.session_expiry / 2).min(config.statement_timeout)
}

/// After a good heartbeat, whether the database answers everything: no
/// statement timed out within the statement timeout (a stuck one would have).
fn database_ok(shared: &Context) -> bool {
    !shared
        .store
        .timed_out_within(shared.config.statement_timeout)
}

/// Heartbeats until cancelled; replaces the session when its row is gone.
pub async fn keep(shared: Arc<Context>, cancel: CancellationToken) {
    let expiry = shared.config.session_expiry;
    let mut tick = tokio::time::interval(shared.config.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let id = shared.session.id();
        let limit = beat_limit(&shared.config);
        let beat = shared
            .store
            .within(limit, shared.store.heartbeat(&id))
            .await;
        match beat {
            Ok(true) => {
                shared.session.renewed();
                shared
                    .health
                    .database
                    .store(database_ok(&shared), std::sync::atomic::Ordering::Relaxed);
                warned = false;
            }
            Ok(false) => {
                tracing::warn!(session = %id, "session row is gone (declared dead): every lease is lost; registering a new session");
                shared.metrics.sessions_lost.inc();
                let new = new_id();
                match register(&shared, &new).await {
                    Ok(()) => {
                        shared.session.replace(new.clone());
                        tracing::info!(session = %new, "registered a new session");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot register a new session; will retry")
                    }
                }
            }
            Err(e) => {
                shared
                    .health
                    .database
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                if !shared.session.live(expiry) && !warned {
                    warned = true;
                    tracing::error!(session = %id, error = %e, "no successful heartbeat for the session expiry: results are no longer acknowledged until the database is back");
                } else {
                    tracing::warn!(session = %id, error = %e, "heartbeat failed");
                }
            }
        }
        shared.health.session.store(
            shared.session.live(expiry),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}
