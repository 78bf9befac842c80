//! Flow control toward the handler: what may be sent now.
//!
//! Four limits, each checked per item before a call starts:
//! - the fleet's `--rate-limit`, a bucket in `feed_buckets` that every
//!   processor reserves small chunks of tokens from, a little ahead of
//!   spending them (so it holds whatever the number of processors, a
//!   processor's own latency loses no tokens, and an idle one strands at
//!   most what it reserved);
//! - each tenant's rate (`feed_limits.rate`), the same way;
//! - each tenant's `max_in_flight`, shared out as slots in `feed_slots`
//!   under a lock of the tenant's limits row: the live sessions' slots
//!   never add up to more than the cap, and each session takes a max-min
//!   fair share of it;
//! - the adaptive rate this processor sends at after the handler answered
//!   429 (or 503 with `Retry-After`), see `adaptive`.
//!
//! Dispatch checks them without waiting on the database: the claims run in
//! this module's task, which dispatch wakes when it runs short, and which
//! wakes dispatch when slots arrive and when tokens arrive or come due (a
//! tenant held back is told no instant to look again at: were it not
//! woken, a low rate would send only when something else woke dispatch).
//! With no limit set, dispatch skips all of it.

//!
//! Inside: `gate` (dispatch's look at the limits, and the permits of calls
//! in flight), `task` (the limits task), `pool`, `rate`, `adaptive` and
//! `share`.

mod adaptive;
mod bucket;
mod gate;
mod pool;
mod share;
mod task;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

use adaptive::Adaptive;
pub(crate) use gate::{Gate, Permit};
use pool::Pool;

use crate::ids::Tenant;
pub use crate::rate::Rate;
pub(crate) use task::{Claimer, run};

/// Demand older than this no longer draws tokens or slots; tokens claimed
/// before are dropped rather than saved up.
pub(crate) const DEMAND: Duration = Duration::from_secs(1);
/// Dispatch with no items to send for this long is idle: the limits are
/// read every ten heartbeats then, and at once when it has items again.
const IDLE: Duration = Duration::from_secs(5);
/// A tenant short of slots asks again no sooner than this.
const RECLAIM: Duration = Duration::from_millis(100);

/// What dispatch and the limits task share.
#[derive(Debug)]
pub struct Limits {
    state: Mutex<State>,
    /// Wakes the limits task: dispatch ran short of tokens or slots.
    short: Notify,
    /// Wakes dispatch: tokens or slots arrived, or calls ended.
    pub(crate) ready: Notify,
}

#[derive(Debug)]
struct State {
    /// The limits table has been read once: before that nothing is sent.
    loaded: bool,
    /// When it was last read.
    read_at: Option<Instant>,
    /// A read failed: the next waits until then (a database that does not
    /// answer gets no read each round on top of everything else's).
    retry_at: Option<Instant>,
    fleet: Option<Pool>,
    adaptive: Adaptive,
    tenants: HashMap<Tenant, TenantState>,
    /// When dispatch last wanted to send anything.
    demand_at: Option<Instant>,
}

/// One tenant's limits and what this processor holds of them.
#[derive(Debug, Default)]
struct TenantState {
    weight: u32,
    /// Its `max_in_flight`; None = no cap.
    cap: Option<u32>,
    /// Slots granted to this session (of `cap`).
    slots: u32,
    /// Items of it in calls now.
    calls: u32,
    /// Sends of it refused for want of a slot since its slots were last
    /// claimed (or its cap, when dispatch passed its partitions over for
    /// want of one): the demand its next claim asks for.
    refused: u32,
    /// The most calls in flight plus refusals since its slots were last
    /// claimed: a claim asks for twice that (up to the cap), so that a cap
    /// that does not bind never holds dispatch back between claims.
    peak: u32,
    /// When its slots were last claimed.
    claimed_at: Option<Instant>,
    /// A claim is on its way with this many calls in use: until it comes
    /// back no call starts beyond them, since the claim may grant no more.
    claiming: Option<u32>,
    rate: Option<Pool>,
}

impl TenantState {
    /// Whether every slot it holds has a call (or a claim on its way may
    /// grant no more than the calls it counted).
    fn no_slot(&self) -> bool {
        self.calls >= self.slots || self.claiming.is_some_and(|c| self.calls >= c)
    }

    /// The slots its next claim asks for, of `cap`.
    fn wanted(&self, cap: u32) -> u32 {
        (self.calls + self.refused)
            .max(self.peak.saturating_mul(2))
            .min(cap)
    }
}

/// Why an item may not be sent now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Blocked {
    /// Nothing may be sent; try again at the instant (None: when woken).
    All(Option<Instant>),
    /// Only this item's tenant is held back.
    Tenant,
}

impl Limits {
    /// Limits for a processor sending batches of up to `batch` items, with
    /// the fleet's `rate` if one is set.
    pub fn new(rate: Option<Rate>, burst: Option<u32>, batch: usize) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            state: Mutex::new(State {
                loaded: false,
                read_at: None,
                retry_at: None,
                fleet: rate.map(|r| Pool::new("fleet".into(), r.0, burst, batch, now)),
                adaptive: Adaptive::new(batch, now),
                tenants: HashMap::new(),
                demand_at: None,
            }),
            short: Notify::new(),
            ready: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("limits lock")
    }

    /// Takes in a handler call's answer for the adaptive rate.
    pub(crate) fn answered(&self, items: usize, throttled: bool) -> Option<f64> {
        let mut s = self.lock();
        s.adaptive.answered(items, throttled, Instant::now());
        s.adaptive.rate()
    }

    /// The adaptive rate now (items per second); None = not limited.
    pub fn adaptive_rate(&self) -> Option<f64> {
        self.lock().adaptive.rate()
    }
}
