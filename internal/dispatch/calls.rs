//! Handler calls started from the prefetch buffer: how many may start
//! (free slots, room for items in flight, a partial batch's wait, the
//! flow-control gate), and the tasks that carry them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::deliver::{self, Call, Delivery, deliver};
use super::{Dispatcher, HELD_BACK_ROUNDS, IN_FLIGHT_PER_SLOT};
use crate::ids::{ItemKey, PartitionId, Tenant};
use crate::limits::{Blocked, Gate, Permit};
use crate::metrics::TenantLabel;
use crate::store::{Fence, ReadyItem};

/// The handler calls and the items they carry.
pub(super) struct Calls {
    /// Item id → the item as delivered, for items being delivered.
    pub(super) in_flight: HashMap<ItemKey, Fence>,
    pub(super) tasks: JoinSet<Vec<(ItemKey, Delivery)>>,
    /// Task id → item ids, to clean up after a delivery that panicked.
    pub(super) task_items: HashMap<tokio::task::Id, Vec<ItemKey>>,
    /// Tasks whose handler call has not answered yet: the busy slots.
    pub(super) calling: HashSet<tokio::task::Id>,
    /// Where delivery tasks report that their call has answered.
    pub(super) answered: deliver::Answered,
    pub(super) answers: mpsc::UnboundedReceiver<tokio::task::Id>,
    /// Since when a partial batch has waited for more items.
    pub(super) partial_since: Option<Instant>,
}

impl Default for Calls {
    fn default() -> Self {
        let (answered, answers) = mpsc::unbounded_channel();
        Calls {
            in_flight: HashMap::new(),
            tasks: JoinSet::new(),
            task_items: HashMap::new(),
            calling: HashSet::new(),
            answered,
            answers,
            partial_since: None,
        }
    }
}

impl Dispatcher {
    /// Calls answered: their slots are free.
    pub(super) fn answered(&mut self, task: tokio::task::Id) -> bool {
        self.calls.calling.remove(&task);
        while let Ok(task) = self.calls.answers.try_recv() {
            self.calls.calling.remove(&task);
        }
        self.refill_at = Instant::now();
        true
    }

    /// Starts calls from the prefetch buffer, and a refill when the buffer
    /// runs low; returns when to poll next and whether more work was ready
    /// than slots.
    pub(super) fn poll(&mut self) -> (Instant, bool) {
        let ctx = self.ctx.clone();
        let cfg = &ctx.config;
        let now = Instant::now();
        // The breaker opened (in a delivery that may not have ended yet):
        // no call starts but a probe from now on.
        if self.ctx.breaker.is_open() {
            self.outage.begin(now);
        }
        if let Some(until) = self.outage.until {
            if now < until {
                return (until, false);
            }
            if !self.calls.in_flight.is_empty() {
                return (now + cfg.dispatch.poll_interval, false);
            }
        }
        // No call while the session is not live, or while results wait
        // for the database: their answers could not be stored.
        let waiting = self.ctx.health.writes_waiting.load(Ordering::Relaxed);
        if !self.ctx.session.live(cfg.leases.session_expiry) || waiting > 0 {
            return (now + cfg.dispatch.poll_interval, false);
        }
        let batch = cfg.handler.batch_size;
        // One probe delivery of one item while the handler is down.
        let (calls, per_call, mut room) = if self.outage.until.is_some() {
            (1, 1, 1)
        } else {
            let cap = cfg.handler.concurrency * batch * IN_FLIGHT_PER_SLOT;
            (
                cfg.handler
                    .concurrency
                    .saturating_sub(self.calls.calling.len()),
                batch,
                cap.saturating_sub(self.calls.in_flight.len()),
            )
        };
        let mut next = now + cfg.dispatch.poll_interval;
        let mut gate = ctx.limits.gate();
        if !self.buffer.is_empty() {
            gate.demand();
        }
        let binds = gate.binds();
        let probing = self.outage.until.is_some();
        if probing {
            self.outage.prefer(&mut self.buffer);
        }
        for _ in 0..calls {
            let n = self.buffer.len().min(per_call).min(room);
            if n == 0 {
                break;
            }
            // A partial batch waits up to --batch-wait for more items while
            // another call runs; an idle processor sends it at once.
            if n < per_call && !self.calls.calling.is_empty() {
                let deadline =
                    *self.calls.partial_since.get_or_insert(now) + cfg.handler.batch_wait;
                if now < deadline {
                    next = next.min(deadline);
                    break;
                }
            }
            self.calls.partial_since = None;
            let items: Vec<ReadyItem> = if binds {
                match self.admit(&mut gate, n) {
                    Ok(items) if !items.is_empty() => items,
                    Ok(_) => break,
                    Err(at) => {
                        next = next.min(at.unwrap_or(next));
                        break;
                    }
                }
            } else {
                self.buffer.drain(..n).collect()
            };
            let counted = probing && self.outage.probing(&items[0].fence.key());
            if probing {
                ctx.metrics.probes.inc();
            }
            room -= items.len();
            let permit = gate.permit();
            self.start(items, permit, counted);
        }
        // Items that may go now: those of tenants held back by their limits
        // wait in the buffer, and must not keep other tenants' work out.
        let ready = if binds {
            let rotation = &self.rotation;
            let held_back = |i: &&ReadyItem| {
                rotation
                    .tenant(&i.fence.partition_id)
                    .is_some_and(|t| gate.tenant_blocked(t))
            };
            self.buffer.len() - self.buffer.iter().filter(held_back).count()
        } else {
            self.buffer.len()
        };
        drop(gate);
        // Keep a round of calls buffered ahead: the refill runs beside the
        // loop, so calls that free up meanwhile start from the buffer, and
        // one statement serves several completions. (A refill that ends
        // polls again at once; one that found partitions dry while others
        // wait in the rotation lets the next start at once too.) Held-back
        // items count only up to a bound, so the buffer stays bounded.
        let target = cfg.handler.concurrency * batch;
        if self.refilling.is_none()
            && now >= self.refill_at
            && ready < target
            && self.buffer.len() < target * HELD_BACK_ROUNDS
        {
            self.start_refill(target * 2 - ready);
        }
        (next, self.more)
    }

    /// Takes up to `n` buffered items that the limits let go now, oldest
    /// first, passing over those of tenants held back; Err when nothing
    /// may go (with when to look again, if known).
    fn admit(&mut self, gate: &mut Gate<'_>, n: usize) -> Result<Vec<ReadyItem>, Option<Instant>> {
        let mut picked = Vec::new();
        let mut held_back: HashSet<&Tenant> = HashSet::new();
        let mut stop = None;
        for (i, item) in self.buffer.iter().enumerate() {
            if picked.len() == n {
                break;
            }
            let tenant = self.rotation.tenant(&item.fence.partition_id);
            if tenant.is_some_and(|t| held_back.contains(t)) {
                continue;
            }
            match gate.admit(tenant) {
                Ok(()) => picked.push(i),
                Err(Blocked::Tenant) => {
                    held_back.extend(tenant);
                }
                Err(Blocked::All(at)) => {
                    stop = Some(at);
                    break;
                }
            }
        }
        if picked.is_empty()
            && let Some(at) = stop
        {
            return Err(at);
        }
        let mut taken = Vec::with_capacity(picked.len());
        for i in picked.into_iter().rev() {
            taken.extend(self.buffer.remove(i));
        }
        taken.reverse();
        Ok(taken)
    }

    /// Starts one handler call for `items` (a batch, or one item); the
    /// permit holds their tenants' in-flight slots until it answers;
    /// `counted`: its failures count attempts even while the breaker is open.
    fn start(&mut self, items: Vec<ReadyItem>, permit: Option<Permit>, counted: bool) {
        let ids: Vec<ItemKey> = items.iter().map(|i| i.fence.key()).collect();
        let tenants: Vec<TenantLabel> = items
            .iter()
            .map(|i| self.tenant_label(&i.fence.partition_id))
            .collect();
        for (item, tenant) in items.iter().zip(&tenants) {
            if let Some(waited) = item.waited {
                let wait = waited + item.read.elapsed();
                let queue_wait = self.ctx.metrics.queue_wait.get_or_create(tenant);
                queue_wait.observe(wait.as_secs_f64());
                self.ctx.metrics.recent.wait(wait);
            }
            self.calls
                .in_flight
                .insert(item.fence.key(), item.fence.clone());
        }
        self.ctx
            .metrics
            .in_flight
            .set(self.calls.in_flight.len() as i64);
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let answered = self.calls.answered.clone();
        let call = Call {
            items,
            tenants,
            permit,
            counted,
        };
        // Boxed: the delivery's state machine is kilobytes, and a task's
        // future is moved several times on its way into the scheduler.
        let task = self.calls.tasks.spawn(Box::pin(async move {
            deliver(&ctx.delivering(), &me, call, &answered).await
        }));
        self.calls.calling.insert(task.id());
        self.calls.task_items.insert(task.id(), ids);
    }

    /// The metrics' tenant label of a held partition.
    pub(super) fn tenant_label(&self, partition: &PartitionId) -> TenantLabel {
        let tenant = self.rotation.tenant(partition).map(|t| t.as_str());
        self.ctx.metrics.tenants.label(tenant)
    }
}
