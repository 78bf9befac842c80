//! Dispatch's side of the limits: one poll's look at them (`Gate`), which
//! admits items one by one and counts them against every limit, and the
//! `Permit` a call holds its tenants' slots with until it ends. Nothing
//! here waits on the database: what runs short wakes the limits task.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use tokio::time::Instant;

use super::{Blocked, IDLE, Limits, State};
use crate::ids::Tenant;

impl Limits {
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
}

/// One poll's look at the limits (holds their lock: keep it short).
pub(crate) struct Gate<'a> {
    state: MutexGuard<'a, State>,
    limits: &'a Arc<Limits>,
    now: Instant,
    /// Something ran short: the limits task is woken when the look ends.
    short: bool,
    /// Items admitted per tenant in this look.
    started: HashMap<Tenant, u32>,
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
    pub(crate) fn weight(&self, tenant: &Tenant) -> u32 {
        self.state
            .tenants
            .get(tenant)
            .map_or(1, |t| t.weight.max(1))
    }

    /// Whether items of `tenant` are held back by its own limits now.
    pub(crate) fn tenant_blocked(&self, tenant: &Tenant) -> bool {
        self.state.tenants.get(tenant).is_some_and(|t| {
            t.cap.is_some_and(|_| t.no_slot())
                || t.rate.as_ref().is_some_and(|p| !p.spendable(self.now))
        })
    }

    /// Admits one item of `tenant` (None: it has none) and counts it
    /// against every limit, or says why it may not go.
    pub(crate) fn admit(&mut self, tenant: Option<&Tenant>) -> Result<(), Blocked> {
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
                        self.started.insert(name.clone(), 1);
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
    pub(crate) fn starved(&mut self, tenant: &Tenant) {
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
    tenants: Vec<(Tenant, u32)>,
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
