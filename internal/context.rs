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
pub(crate) struct Context {
    /// Settings.
    pub config: Config,
    /// The database.
    pub store: Store,
    /// This processor's session (the keeper and the retention loop hold it too).
    pub session: Arc<Session>,
    /// Exported counters (shared: the webhook sender holds them too).
    pub metrics: Arc<Metrics>,
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
    /// Wakes the dispatch loop when new work may be ready (PostgreSQL
    /// NOTIFY, or an enqueue through this processor's API).
    pub wake: Arc<tokio::sync::Notify>,
    /// The group the dispatch loop's side tasks (refills, gate checks,
    /// acquire cycles) are started in, stopped at shutdown.
    pub tasks: Tasks,
    /// Makes the `Feed-Inputs` URLs of fan-in items; None without a
    /// listener or with `--inputs-url off`.
    pub inputs: Option<Arc<crate::inputs::Inputs>>,
}

/// What acquire cycles and gate checks may touch: the store, the metrics
/// and the lease settings, not the handler, the limits or the session.
#[derive(Clone, Copy)]
pub(crate) struct Leasing<'a> {
    /// The database.
    pub store: &'a Store,
    /// Exported counters.
    pub metrics: &'a Metrics,
    /// Heartbeats, expiry, the acquire interval and the partition cap.
    pub leases: &'a crate::config::LeaseConfig,
}

/// What a delivery may touch: the handler, the completer, flow control
/// and health, not the store, the tasks or the other settings.
#[derive(Clone, Copy)]
pub(crate) struct Delivering<'a> {
    /// Turns items into outcomes.
    pub handler: &'a dyn Handler,
    /// Writes results in batches.
    pub completer: &'a Completer,
    /// Fed each call's result.
    pub breaker: &'a Breaker,
    /// Fed each call's answer (the adaptive rate).
    pub limits: &'a crate::limits::Limits,
    /// Exported counters.
    pub metrics: &'a Metrics,
    /// The breaker's state and the database hold, for `/readyz`.
    pub health: &'a Health,
    /// Results are written only while it is live and unchanged.
    pub session: &'a Session,
    /// Items per handler call (1: one item, no batch request).
    pub batch_size: usize,
    /// What a failed attempt does to an item.
    pub retries: crate::config::Policy,
    /// How old the last good heartbeat may be for a result to be written.
    pub session_expiry: Duration,
    /// Makes the `Feed-Inputs` URL of an item at a gate above 0.
    pub inputs: Option<&'a crate::inputs::Inputs>,
}

impl Context {
    /// The narrow view leasing and gate checks take.
    pub(crate) fn leasing(&self) -> Leasing<'_> {
        Leasing {
            store: &self.store,
            metrics: &self.metrics,
            leases: &self.config.leases,
        }
    }

    /// The narrow view deliveries take.
    pub(crate) fn delivering(&self) -> Delivering<'_> {
        Delivering {
            handler: &*self.handler,
            completer: &self.completer,
            breaker: &self.breaker,
            limits: &self.limits,
            metrics: &self.metrics,
            health: &self.health,
            session: &self.session,
            batch_size: self.config.handler.batch_size,
            retries: self.config.retries,
            session_expiry: self.config.leases.session_expiry,
            inputs: self.inputs.as_deref(),
        }
    }
}

/// The current session id and when it was last heartbeated successfully.
#[derive(Debug)]
pub(crate) struct Session {
    state: RwLock<State>,
}

#[derive(Debug)]
struct State {
    id: SessionId,
    last_ok: Instant,
}

impl Session {
    /// A session that was just registered.
    pub(crate) fn new(id: SessionId) -> Self {
        Self {
            state: RwLock::new(State {
                id,
                last_ok: Instant::now(),
            }),
        }
    }

    /// The session id leases and results are fenced with.
    pub(crate) fn id(&self) -> SessionId {
        self.state.read().expect("session lock").id.clone()
    }

    /// Whether results may still be acknowledged: the last good heartbeat
    /// is younger than the expiry.
    pub(crate) fn live(&self, expiry: Duration) -> bool {
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
