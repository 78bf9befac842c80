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

mod adaptive;
mod pool;
mod rate;
mod share;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::ids::SessionId;
use crate::store::Store;
use crate::store::limits::Limit;
use adaptive::Adaptive;
use pool::Pool;
pub use rate::Rate;
use share::grant;

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
    tenants: HashMap<String, Tenant>,
    /// When dispatch last wanted to send anything.
    demand_at: Option<Instant>,
}

/// One tenant's limits and what this processor holds of them.
#[derive(Debug, Default)]
struct Tenant {
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

impl Tenant {
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

    /// Opens a look at what may be sent now, for one poll of dispatch.
    pub(crate) fn gate(self: &Arc<Self>) -> Gate<'_> {
        Gate {
            state: self.lock(),
            limits: self,
            now: Instant::now(),
            short: false,
            started: HashMap::new(),
        }
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

/// One poll's look at the limits (holds their lock: keep it short).
pub(crate) struct Gate<'a> {
    state: MutexGuard<'a, State>,
    limits: &'a Arc<Limits>,
    now: Instant,
    /// Something ran short: the limits task is woken when the look ends.
    short: bool,
    /// Items admitted per tenant in this look.
    started: HashMap<String, u32>,
}

impl Gate<'_> {
    /// Whether any limit may hold items back (else every item may go).
    pub(crate) fn binds(&self) -> bool {
        let s = &self.state;
        !s.loaded || s.fleet.is_some() || !s.tenants.is_empty() || s.adaptive.rate().is_some()
    }

    /// Records that dispatch has items to send, limited or not: while it
    /// has, the limits table is read every heartbeat (else every ten).
    pub(crate) fn demand(&mut self) {
        self.demanded();
    }

    /// Records demand now; an idle processor's limits may be ten
    /// heartbeats old, so the limits task is woken to read them at once.
    fn demanded(&mut self) {
        let s = &mut self.state;
        if s.demand_at
            .is_none_or(|t| self.now.saturating_duration_since(t) >= IDLE)
        {
            self.short = true;
        }
        s.demand_at = Some(self.now);
    }

    /// A tenant's share of dispatch against other tenants (1 = even).
    pub(crate) fn weight(&self, tenant: &str) -> u32 {
        self.state
            .tenants
            .get(tenant)
            .map_or(1, |t| t.weight.max(1))
    }

    /// Whether items of `tenant` are held back by its own limits now.
    pub(crate) fn tenant_blocked(&self, tenant: &str) -> bool {
        self.state.tenants.get(tenant).is_some_and(|t| {
            t.cap.is_some_and(|_| t.no_slot())
                || t.rate.as_ref().is_some_and(|p| !p.spendable(self.now))
        })
    }

    /// Admits one item of `tenant` (None: it has none) and counts it
    /// against every limit, or says why it may not go.
    pub(crate) fn admit(&mut self, tenant: Option<&str>) -> Result<(), Blocked> {
        let now = self.now;
        self.demanded();
        let s = &mut *self.state;
        if !s.loaded {
            self.short = true;
            return Err(Blocked::All(None));
        }
        if let Some(t) = tenant.and_then(|name| s.tenants.get_mut(name)) {
            if let Some(p) = &mut t.rate {
                p.mature(now);
            }
            let no_slot = t.cap.is_some() && t.no_slot();
            let no_token = t.rate.as_ref().is_some_and(|p| !p.spendable(now));
            if no_slot || no_token {
                if no_slot {
                    t.refused += 1;
                    t.peak = t.peak.max(t.calls + t.refused);
                }
                if let Some(p) = &mut t.rate {
                    if no_token {
                        p.wait(now);
                    } else {
                        p.wanted_at = Some(now);
                    }
                }
                self.short = true;
                return Err(Blocked::Tenant);
            }
        }
        if let Some(p) = &mut s.fleet {
            p.wanted_at = Some(now);
            p.mature(now);
            if let Err(at) = p.spend(now) {
                p.wait(now);
                self.short = true;
                return Err(Blocked::All(at));
            }
        }
        if let Err(at) = s.adaptive.take(1, now) {
            // Not sent after all: the fleet's token goes back.
            if let Some(p) = &mut s.fleet {
                p.refund();
            }
            return Err(Blocked::All(Some(at)));
        }
        if let Some(p) = &mut s.fleet {
            self.short |= p.short(now);
        }
        if let Some(name) = tenant
            && let Some(t) = s.tenants.get_mut(name)
        {
            if let Some(p) = &mut t.rate {
                p.wanted_at = Some(now);
                let _ = p.spend(now);
                self.short |= p.short(now);
            }
            if t.cap.is_some() {
                t.calls += 1;
                t.peak = t.peak.max(t.calls);
                match self.started.get_mut(name) {
                    Some(n) => *n += 1,
                    None => {
                        self.started.insert(name.to_string(), 1);
                    }
                }
            }
        }
        Ok(())
    }

    /// The permit for the items admitted since the last one: it holds
    /// their tenants' slots until dropped (when the handler has answered).
    pub(crate) fn permit(&mut self) -> Option<Permit> {
        let started = std::mem::take(&mut self.started);
        (!started.is_empty()).then(|| Permit {
            limits: self.limits.clone(),
            tenants: started.into_iter().collect(),
        })
    }

    /// Records that dispatch passed `tenant`'s partitions over for want of
    /// a slot or a token: it wants them (slots: as many as its cap, for all
    /// it knows), or it would never fetch an item to be refused.
    pub(crate) fn starved(&mut self, tenant: &str) {
        let Some(t) = self.state.tenants.get_mut(tenant) else {
            return;
        };
        if let Some(cap) = t.cap {
            t.refused = t.refused.max(cap);
            t.peak = t.peak.max(cap);
        }
        if let Some(p) = &mut t.rate {
            if p.spendable(self.now) {
                p.wanted_at = Some(self.now);
            } else {
                p.wait(self.now);
            }
        }
        self.short = true;
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        if self.short {
            self.limits.short.notify_one();
        }
    }
}

/// Slots held by calls in flight, given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    limits: Arc<Limits>,
    tenants: Vec<(String, u32)>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.limits.lock();
        for (name, n) in &self.tenants {
            if let Some(t) = s.tenants.get_mut(name) {
                t.calls = t.calls.saturating_sub(*n);
            }
        }
        drop(s);
        self.limits.ready.notify_one();
    }
}

/// What the limits task needs of the running processor.
pub(crate) struct Claimer {
    /// How often the limits are read while dispatch has work (`--heartbeat-interval`).
    pub every: Duration,
    /// When a session's slots go with it (`--session-expiry`).
    pub expiry: Duration,
    /// Items per handler call at most (`--batch-size`).
    pub batch: usize,
    pub store: Store,
    /// This processor's session id now (it changes when the session is replaced).
    pub session: Box<dyn Fn() -> SessionId + Send + Sync>,
    /// Whether the session heartbeated lately: while it has not, nothing
    /// is dispatched, and the task leaves the database to the heartbeat.
    pub live: Box<dyn Fn() -> bool + Send + Sync>,
    pub limits: Arc<Limits>,
}

/// Keeps the limits current and claims tokens and slots until cancelled
/// (the session's slots are given back with its partitions at shutdown).
pub(crate) async fn run(ctx: Claimer, cancel: CancellationToken) {
    let limits = ctx.limits.clone();
    loop {
        expire(&limits);
        let next = step(&ctx, &limits).await;
        let next = next.min(came_due(&limits, Instant::now()));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = limits.short.notified() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

/// One round: read the limits when due, claim what is short; returns when
/// the next round is due at the latest.
async fn step(ctx: &Claimer, limits: &Limits) -> Instant {
    let now = Instant::now();
    if !(ctx.live)() {
        return now + ctx.every;
    }
    let (read, claims) = {
        let s = limits.lock();
        let busy = s
            .demand_at
            .is_some_and(|t| now.saturating_duration_since(t) < IDLE);
        let every = if busy { ctx.every } else { ctx.every * 10 };
        let due = !s.loaded
            || s.read_at
                .is_none_or(|t| now.saturating_duration_since(t) >= every);
        let read = due && s.retry_at.is_none_or(|t| now >= t);
        (read, due_claims(&s, now, ctx.every))
    };
    let mut next = now + ctx.every;
    {
        // A pool that must wait before its next claim is looked at then.
        let s = limits.lock();
        let pools = s
            .fleet
            .iter()
            .chain(s.tenants.values().filter_map(|t| t.rate.as_ref()));
        for p in pools.filter(|p| p.wanted(now) && p.short(now)) {
            next = next.min(p.not_before.max(now + Duration::from_millis(1)));
        }
    }
    if read {
        match ctx.store.limits().await {
            Ok(rows) => load(limits, rows, ctx.batch),
            Err(e) => {
                let wait = ctx.every * 5;
                tracing::warn!(error = %e, retry_in = ?wait, "cannot read the tenants' limits; will retry");
                limits.lock().retry_at = Some(Instant::now() + wait);
            }
        }
        limits.ready.notify_one();
    }
    for claim in claims {
        if let Some(at) = run_claim(ctx, limits, claim).await {
            next = next.min(at);
        }
    }
    next
}

/// Takes in the limits table.
fn load(limits: &Limits, rows: Vec<Limit>, batch: usize) {
    let now = Instant::now();
    let mut s = limits.lock();
    s.loaded = true;
    s.read_at = Some(now);
    s.retry_at = None;
    let mut old = std::mem::take(&mut s.tenants);
    for l in rows {
        let mut t = old.remove(&l.tenant).unwrap_or_default();
        t.weight = l.weight.unwrap_or(1).max(1);
        t.cap = l.max_in_flight;
        t.rate = l.rate.map(|r| {
            let new = Pool::new(format!("tenant:{}", l.tenant), r, l.burst, batch, now);
            match t.rate.take() {
                // Unchanged: keep the tokens reserved.
                Some(p) if p.rate == new.rate && p.burst == new.burst => p,
                _ => {
                    // Written by hand: said once per change of the row.
                    if new.rate != r {
                        tracing::warn!(tenant = %l.tenant, rate = r, used = %Rate(new.rate),
                            "a tenant's rate in feed_limits is out of range (1/h to 1000000/s); using the nearest");
                    }
                    new
                }
            }
        });
        s.tenants.insert(l.tenant, t);
    }
    // A tenant whose limits were cleared keeps counting its calls in
    // flight until they end, with no cap.
    for (name, mut t) in old {
        if t.calls > 0 {
            t.cap = None;
            t.rate = None;
            s.tenants.insert(name, t);
        }
    }
}

/// A claim the limits task makes.
#[derive(Debug)]
enum Due {
    /// Tokens from a pool: the fleet's (None) or a tenant's.
    Tokens(Option<String>, String, f64, f64, f64),
    /// A tenant's slots (what it has in use and wants is taken as the
    /// claim starts, so that its calls are held at their count for one
    /// round trip, not for every claim before it).
    Slots(String),
}

/// The claims due now.
fn due_claims(s: &State, now: Instant, every: Duration) -> Vec<Due> {
    let mut out = Vec::new();
    let pools = s.fleet.iter().map(|p| (None, p)).chain(
        s.tenants
            .iter()
            .filter_map(|(n, t)| t.rate.as_ref().map(|p| (Some(n.clone()), p))),
    );
    for (tenant, p) in pools {
        if p.wanted(now) && p.short(now) && now >= p.not_before {
            out.push(Due::Tokens(
                tenant,
                p.name.clone(),
                p.want(now),
                p.rate,
                p.burst,
            ));
        }
    }
    for (name, t) in &s.tenants {
        let Some(cap) = t.cap else { continue };
        let wanted = t.wanted(cap);
        let since = t.claimed_at.map(|c| now.saturating_duration_since(c));
        let short = t.refused > 0 && t.slots < cap && since.is_none_or(|d| d >= RECLAIM);
        let refresh = (t.slots > 0 || wanted > 0) && since.is_none_or(|d| d >= every);
        if short || refresh {
            out.push(Due::Slots(name.clone()));
        }
    }
    out
}

/// Makes one claim; returns when to look again if it must wait.
async fn run_claim(ctx: &Claimer, limits: &Limits, due: Due) -> Option<Instant> {
    match due {
        Due::Tokens(tenant, name, n, rate, burst) => {
            let asked = Instant::now();
            let claim = ctx.store.reserve(&name, n, rate, burst).await;
            let now = Instant::now();
            let mut s = limits.lock();
            let pool = match &tenant {
                None => s.fleet.as_mut(),
                Some(t) => s.tenants.get_mut(t).and_then(|t| t.rate.as_mut()),
            }?;
            match claim {
                Ok(Some(offset)) => {
                    tracing::debug!(bucket = %name, tokens = n, offset_us = offset, "reserved");
                    pool.reserved(n, offset, asked, now);
                    // Keep reserving while short (the next round is due at once).
                    let more = pool.short(now).then_some(now);
                    drop(s);
                    limits.ready.notify_one();
                    more
                }
                Ok(None) => {
                    pool.not_before = now + Duration::from_millis(5);
                    Some(pool.not_before)
                }
                Err(e) => {
                    tracing::warn!(bucket = %name, error = %e, "cannot reserve rate tokens; will retry");
                    pool.not_before = now + Duration::from_millis(250);
                    Some(pool.not_before)
                }
            }
        }
        Due::Slots(tenant) => {
            let (in_use, wanted) = {
                let mut s = limits.lock();
                let t = s.tenants.get_mut(&tenant)?;
                let cap = t.cap?;
                t.claiming = Some(t.calls);
                (t.calls, t.wanted(cap))
            };
            let me = (ctx.session)();
            let granted = ctx
                .store
                .claim_slots(&tenant, &me, in_use, wanted, ctx.expiry, grant)
                .await;
            let mut s = limits.lock();
            let t = s.tenants.get_mut(&tenant)?;
            t.claimed_at = Some(Instant::now());
            t.claiming = None;
            t.refused = 0;
            t.peak = t.calls;
            match granted {
                Ok(Some(n)) => {
                    let more = n > t.slots;
                    t.slots = n;
                    drop(s);
                    if more {
                        limits.ready.notify_one();
                    }
                    None
                }
                Ok(None) => {
                    // The cap is gone from feed_limits, and its other limits
                    // may have changed with it: read them before the cap is
                    // let go (dropping it alone would send unlimited until
                    // the next read).
                    s.read_at = None;
                    Some(Instant::now())
                }
                Err(e) => {
                    tracing::warn!(tenant = %tenant, error = %e, "cannot claim in-flight slots; will retry");
                    None
                }
            }
        }
    }
}

/// Wakes dispatch when a token that a send waited for has come due;
/// returns when the next such token comes due at the latest.
fn came_due(limits: &Limits, now: Instant) -> Instant {
    let mut next = now + DEMAND;
    let mut s = limits.lock();
    let State { fleet, tenants, .. } = &mut *s;
    let mut wake = false;
    for p in fleet
        .iter_mut()
        .chain(tenants.values_mut().filter_map(|t| t.rate.as_mut()))
    {
        match p.came_due(now) {
            Ok(due) => wake |= due,
            Err(at) => next = next.min(at.unwrap_or(next)),
        }
    }
    drop(s);
    if wake {
        limits.ready.notify_one();
    }
    next
}

/// Drops tokens nobody asked for lately, so that none are saved up.
fn expire(limits: &Limits) {
    let now = Instant::now();
    let mut s = limits.lock();
    let State { fleet, tenants, .. } = &mut *s;
    for p in fleet
        .iter_mut()
        .chain(tenants.values_mut().filter_map(|t| t.rate.as_mut()))
    {
        if !p.wanted(now) {
            p.forget();
        }
    }
}
