//! The limits task: it reads `feed_limits`, reserves rate tokens and
//! claims in-flight slots when dispatch runs short, and wakes dispatch
//! when they arrive or come due, so dispatch never awaits the database
//! for a limit.

use std::sync::Arc;

use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::pool::Pool;
use super::share::grant;
use super::{DEMAND, IDLE, Limits, RECLAIM, Rate, State};
use crate::ids::{SessionId, Tenant};
use crate::store::Store;
use crate::store::limits::Limit;

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
    Tokens(Option<Tenant>, String, f64, f64, f64),
    /// A tenant's slots (what it has in use and wants is taken as the
    /// claim starts, so that its calls are held at their count for one
    /// round trip, not for every claim before it).
    Slots(Tenant),
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
            reserve(ctx, limits, tenant.as_ref(), &name, n, rate, burst).await
        }
        Due::Slots(tenant) => claim(ctx, limits, &tenant).await,
    }
}

/// Reserves `n` tokens of a pool (the fleet's, or `tenant`'s) at `rate`
/// and `burst`; returns when to look again if it must wait.
async fn reserve(
    ctx: &Claimer,
    limits: &Limits,
    tenant: Option<&Tenant>,
    name: &str,
    n: f64,
    rate: f64,
    burst: f64,
) -> Option<Instant> {
    let asked = Instant::now();
    let claim = ctx.store.reserve(name, n, rate, burst).await;
    let now = Instant::now();
    let mut s = limits.lock();
    let pool = match tenant {
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

/// Claims `tenant`'s share of its in-flight slots for what it has in use
/// and wants; returns when to look again if it must wait.
async fn claim(ctx: &Claimer, limits: &Limits, tenant: &Tenant) -> Option<Instant> {
    let (in_use, wanted) = {
        let mut s = limits.lock();
        let t = s.tenants.get_mut(tenant)?;
        let cap = t.cap?;
        t.claiming = Some(t.calls);
        (t.calls, t.wanted(cap))
    };
    let me = (ctx.session)();
    let granted = ctx
        .store
        .claim_slots(tenant, &me, in_use, wanted, ctx.expiry, grant)
        .await;
    let mut s = limits.lock();
    let t = s.tenants.get_mut(tenant)?;
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

/// Wakes dispatch when a token that a send waited for has come due;
/// returns when the next such token comes due at the latest.
pub(super) fn came_due(limits: &Limits, now: Instant) -> Instant {
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
