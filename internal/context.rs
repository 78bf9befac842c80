//! What the tasks of one running processor share: settings, the store,
//! the session cell, metrics, health, the handler and the completer.
//!
//! It depends on none of the tasks (dispatch, session keeper, retention),
//! so they can all use it without importing each other or `run`.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::Config;
use crate::breaker::Breaker;
use crate::completer::Completer;
use crate::handler::Handler;
use crate::ids::SessionId;
use crate::metrics::Metrics;
use crate::server::Health;
use crate::store::Store;
use crate::tasks::Tasks;

/// What the tasks of one running processor share.
pub struct Context {
    /// Settings.
    pub config: Config,
    /// The database.
    pub store: Store,
    /// This processor's session (the keeper and the retention loop hold it too).
    pub session: Arc<Session>,
    /// Exported counters.
    pub metrics: Metrics,
    /// What `/readyz` reports.
    pub health: Arc<Health>,
    /// Opens when most handler calls fail as an outage (5xx, timeouts).
    pub breaker: Breaker,
    /// Flow control: what may be sent to the handler now.
    pub limits: Arc<crate::limits::Limits>,
    /// Turns items into outcomes (HTTP by default).
    pub handler: Arc<dyn Handler>,
    /// Writes results in batches.
    pub completer: Completer,
    /// Wakes the dispatch loop when new work may be ready (PostgreSQL NOTIFY).
    pub wake: Arc<tokio::sync::Notify>,
    /// The group the dispatch loop's side tasks (refills, gate checks,
    /// acquire cycles) are started in, stopped at shutdown.
    pub tasks: Tasks,
}

/// What acquire cycles and gate checks may touch: the store, the metrics
/// and the lease settings, not the handler, the limits or the session.
#[derive(Clone, Copy)]
pub struct Leasing<'a> {
    /// The database.
    pub store: &'a Store,
    /// Exported counters.
    pub metrics: &'a Metrics,
    /// Heartbeats, expiry, the acquire interval and the partition cap.
    pub leases: &'a crate::config::LeaseConfig,
}

impl Context {
    /// The narrow view leasing and gate checks take.
    pub fn leasing(&self) -> Leasing<'_> {
        Leasing {
            store: &self.store,
            metrics: &self.metrics,
            leases: &self.config.leases,
        }
    }
}

/// The current session id and when it was last heartbeated successfully.
#[derive(Debug)]
pub struct Session {
    state: RwLock<State>,
}

#[derive(Debug)]
struct State {
    id: SessionId,
    last_ok: Instant,
}

impl Session {
    /// A session that was just registered.
    pub fn new(id: SessionId) -> Self {
        Self {
            state: RwLock::new(State {
                id,
                last_ok: Instant::now(),
            }),
        }
    }

    /// The session id leases and results are fenced with.
    pub fn id(&self) -> SessionId {
        self.state.read().expect("session lock").id.clone()
    }

    /// Whether results may still be acknowledged: the last good heartbeat
    /// is younger than the expiry.
    pub fn live(&self, expiry: Duration) -> bool {
        self.state.read().expect("session lock").last_ok.elapsed() < expiry
    }

    pub(crate) fn renewed(&self) {
        self.state.write().expect("session lock").last_ok = Instant::now();
    }

    pub(crate) fn replace(&self, id: SessionId) {
        *self.state.write().expect("session lock") = State {
            id,
            last_ok: Instant::now(),
        };
    }
}
