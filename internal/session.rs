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

use crate::Config;
use crate::context::Session;
use crate::ids::SessionId;
use crate::server::Health;
use crate::store::Store;

/// Registers a session row (transient failures are retried), within half the expiry.
pub(crate) async fn register(store: &Store, config: &Config, id: &SessionId) -> crate::Result<()> {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    store
        .within(
            beat_limit(config),
            store.register_session(id, &host, std::process::id(), config.leases.max_partitions),
        )
        .await
}

/// How long one heartbeat (or registration) may take: half the expiry, so
/// that after one is abandoned another still fits in before the session
/// expires, and never more than the statement timeout.
fn beat_limit(config: &Config) -> Duration {
    (config.leases.session_expiry / 2).min(config.database.statement_timeout)
}

/// What a heartbeat writes of the metrics: the rate the processor holds
/// itself to after "too many" answers, and its last five minutes.
fn beat(metrics: &crate::metrics::Metrics, config: &Config) -> crate::store::Beat {
    let in_flight = metrics.in_flight.get().max(0) as u64;
    crate::store::Beat {
        send_rate: metrics.adaptive_rate.get(),
        figures: metrics
            .recent
            .figures(in_flight, config.handler.request_timeout),
    }
}

/// After a good heartbeat, whether the database answers everything: no
/// statement timed out within the statement timeout (a stuck one would have).
fn database_ok(store: &Store, config: &Config) -> bool {
    !store.timed_out_within(config.database.statement_timeout)
}

/// What the keeper task owns: the session cell it keeps, the store it
/// heartbeats in, the health it reports, the count of lost sessions and the
/// settings (expiry, heartbeat interval, statement timeout, `--max-partitions`).
pub(crate) struct Keeper {
    /// The database.
    pub store: Store,
    /// The session cell, which the dispatch loop reads too.
    pub session: Arc<Session>,
    /// What `/readyz` reports.
    pub health: Arc<Health>,
    /// The metrics: `feed_sessions_lost`, the adaptive rate and the last
    /// five minutes, written with each heartbeat so that the console
    /// shows them.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Settings.
    pub config: Config,
}

/// Failed heartbeats, logged at a bounded rate.
static HEARTBEAT_LOG: crate::ratelog::Every = crate::ratelog::Every::new();

/// Heartbeats until cancelled; replaces the session when its row is gone.
pub(crate) async fn keep(keeper: Keeper, cancel: CancellationToken) {
    let Keeper {
        store,
        session,
        health,
        metrics,
        config,
    } = keeper;
    let expiry = config.leases.session_expiry;
    let mut tick = tokio::time::interval(config.leases.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let id = session.id();
        let limit = beat_limit(&config);
        let hold = health.hold();
        let held = hold
            .as_ref()
            .map(|h| (h.reason.as_str(), h.since.elapsed()));
        // While dispatch gives its partitions back, a cap of 0 makes the
        // other processors' shares cover them.
        let releasing = health.releasing.load(std::sync::atomic::Ordering::Relaxed);
        let cap = if releasing {
            Some(0)
        } else {
            config.leases.max_partitions
        };
        let beat = store
            .within(
                limit,
                store.heartbeat(&id, &beat(&metrics, &config), held, cap),
            )
            .await;
        match beat {
            Ok(true) => {
                health
                    .not_primary
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                if HEARTBEAT_LOG.over() {
                    tracing::info!(session = %id, "heartbeat succeeded: the database is reachable again");
                }
                session.renewed();
                health.database.store(
                    database_ok(&store, &config),
                    std::sync::atomic::Ordering::Relaxed,
                );
                warned = false;
            }
            Ok(false) => {
                tracing::warn!(session = %id, "session row is gone (declared dead): every lease is lost; registering a new session");
                metrics.sessions_lost.inc();
                let new = SessionId::random();
                match register(&store, &config, &new).await {
                    Ok(()) => {
                        session.replace(new.clone());
                        tracing::info!(session = %new, "registered a new session");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot register a new session; will retry")
                    }
                }
            }
            Err(e) => {
                health
                    .database
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                let wrong = matches!(e, crate::Error::WrongNode);
                health
                    .not_primary
                    .store(wrong, std::sync::atomic::Ordering::Relaxed);
                if !session.live(expiry) && !warned {
                    warned = true;
                    tracing::error!(session = %id, error = %e, "no successful heartbeat for the session expiry: results are no longer acknowledged until the database is back");
                } else if let Some(n) = HEARTBEAT_LOG.due() {
                    tracing::warn!(session = %id, error = %e, failures = n, "heartbeat failed");
                }
            }
        }
        health
            .session
            .store(session.live(expiry), std::sync::atomic::Ordering::Relaxed);
    }
}
