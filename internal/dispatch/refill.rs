//! The refill: a fair share of ready items from each of the next held
//! partitions in the rotation (see `rotation`), into the prefetch buffer,
//! leaving out what is already known here.

use std::collections::{HashMap, HashSet, VecDeque};

use tokio::time::Instant;

use super::Dispatcher;
use super::fetched::Fetched;
use crate::Result;
use crate::health::Poll;
use crate::ids::{ItemKey, PartitionId, Tenant};
use crate::rotation::Group;
use crate::store::{Ask, ReadyItem};

/// Partitions served by one refill at most; the rotation still visits
/// every partition with work in turn, so fairness is over refills. Serving
/// few partitions per refill keeps locality (a batch of results touches
/// few index pages) while a batch to the handler can still mix
/// partitions. Measured with the drain bench (10,000 items over 100
/// partitions, against the unfair single query of before, same build):
/// 16 per refill drained SQLite at 0.72 of it; 4 at 0.92 (MariaDB 0.91,
/// PostgreSQL 1.04); 1 at 0.94 (MariaDB 1.1, PostgreSQL level), but then a
/// batch holds one partition only. So single items take one partition per
/// refill and batches up to this many.
const MAX_BRANCHES: usize = 4;

/// Partitions one refill serves at most when partitions are small: each
/// runs dry after a few items, so serving one per refill would cost a
/// query per handful of items.
const MAX_SPREAD: usize = 64;

/// New items one look reads at most; a full look runs again at once.
const DISCOVER: usize = 1_000;

impl Dispatcher {
    /// Takes in what a refill fetched; the next one may start at once when
    /// it found more, else after the poll interval (or an event).
    pub(super) fn refill_ended(&mut self, done: Result<Fetched, tokio::task::JoinError>) -> bool {
        self.refilling = None;
        let again = match done {
            Ok(fetched) => self.refilled(fetched),
            Err(e) => {
                tracing::error!(error = %e, "a refill task failed; will retry");
                for p in std::mem::take(&mut self.fetching) {
                    self.rotation.offer(p);
                }
                false
            }
        };
        self.floors.refill_ended();
        let now = Instant::now();
        self.refill_at = if again {
            now
        } else {
            now + self.ctx.config.dispatch.poll_interval
        };
        true
    }

    /// How many items of each partition are in flight, buffered or cooling.
    pub(super) fn known_per_partition(&self) -> HashMap<PartitionId, usize> {
        let mut known: HashMap<PartitionId, usize> = HashMap::new();
        let partitions = self
            .calls
            .in_flight
            .values()
            .map(|f| &f.partition_id)
            .chain(self.buffer.iter().map(|i| &i.fence.partition_id))
            .chain(self.cooling.keys().map(|k| &k.partition));
        for p in partitions {
            *known.entry(p.clone()).or_default() += 1;
        }
        known
    }

    /// Starts fetching up to `want` ready items that are not known here
    /// yet, a fair share from each of the next partitions in the rotation,
    /// as a task beside dispatch (or, when new items are due to be looked
    /// for, that look first). Nothing starts when no partition waits.
    pub(super) fn start_refill(&mut self, want: usize) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let now = Instant::now();
        if self.rotation.needs_discovery(now) {
            let mark = self.rotation.mark;
            self.refilling = Some(self.ctx.tasks.spawn("refill", async move {
                let found = ctx.store.written_since(mark, DISCOVER).await;
                Fetched::Discovered {
                    me,
                    started: now,
                    found,
                }
            }));
            return;
        }
        // Single items: one partition per refill, the best locality. A
        // batch may mix partitions, so batches draw on several. When the
        // last refill's partitions ran dry, serve as many as its yield
        // says are needed to fill the buffer.
        let base = if ctx.config.handler.batch_size > 1 {
            MAX_BRANCHES
        } else {
            1
        };
        let limits = &ctx.limits;
        let mut gate = limits.gate();
        let binds = gate.binds();
        let starved = std::cell::RefCell::new(Vec::new());
        let turns = |g: &Group| match g {
            Group::Tenant(t) if binds => gate.weight(t),
            _ => 1,
        };
        // A tenant with a round of calls buffered already is not served:
        // a slow rate's items would pile up in the buffer, held back, while
        // the other tenants' work waited to be fetched.
        let round = ctx.config.handler.concurrency * ctx.config.handler.batch_size;
        let mut buffered: HashMap<Tenant, usize> = HashMap::new();
        if binds {
            for i in &self.buffer {
                if let Some(t) = self.rotation.tenant(&i.fence.partition_id) {
                    *buffered.entry(t.clone()).or_default() += 1;
                }
            }
        }
        let skip = |g: &Group| match g {
            Group::Tenant(t) if binds && gate.tenant_blocked(t) => {
                starved.borrow_mut().push(t.clone());
                true
            }
            Group::Tenant(t) => buffered.get(t.as_str()).is_some_and(|n| *n >= round),
            _ => false,
        };
        let parts = self.rotation.take(self.spread.max(base), turns, skip);
        for t in starved.into_inner() {
            gate.starved(&t);
        }
        drop(gate);
        if parts.is_empty() {
            self.more = false;
            return;
        }
        let known = self.known_per_partition();
        let share = want.div_ceil(parts.len());
        // A full read of a partition's first `share + known` ready items
        // holds at least `share` that are not known here: those in flight,
        // buffered or cooling are among its ready items and are filtered
        // out when the fetch is taken in. A read after its floor skips them.
        // A partition's weight multiplies its share; its own max_in_flight
        // overrides --max-in-flight-per-partition.
        let asks: Vec<(Ask, usize)> = parts
            .iter()
            .map(|p| {
                let k = known.get(p).copied().unwrap_or(0);
                let attrs = self.held.attrs.get(p);
                let weight = attrs.and_then(|a| a.weight).unwrap_or(1).max(1) as usize;
                let cap = attrs
                    .and_then(|a| a.max_in_flight)
                    .map(|m| m as usize)
                    .or(ctx.config.dispatch.max_in_flight_per_partition);
                let share = share * weight;
                let room = cap.map_or(share, |c| c.saturating_sub(k).min(share));
                let after = self.floors.after(p, now);
                // Scheduled items come by due time, never after a floor:
                // those known here may be among them.
                let ask = Ask {
                    partition: p.clone(),
                    n: if after.is_some() { room } else { room + k },
                    after,
                    due: room + k,
                };
                (ask, room)
            })
            .collect();
        self.fetching = parts.into_iter().collect();
        self.refilling = Some(self.ctx.tasks.spawn("refill", async move {
            let only: Vec<Ask> = asks.iter().map(|(ask, _)| ask.clone()).collect();
            let items = ctx.store.ready_items(&me, &only).await;
            Fetched::Items {
                me,
                asks,
                want,
                started: now,
                items,
            }
        }));
    }

    /// Takes in a finished refill; returns whether the loop should refill
    /// again at once: some of its partitions ran dry (they left the
    /// rotation, so serving the next ones makes progress) or it was a look
    /// for new items. False after an error (the loop waits before the next
    /// try) or when its partitions were only held back by their in-flight
    /// cap.
    fn refilled(&mut self, fetched: Fetched) -> bool {
        let parts = std::mem::take(&mut self.fetching);
        let settled = std::mem::take(&mut self.settled);
        match fetched {
            Fetched::Discovered { me, .. } | Fetched::Items { me, .. } if me != self.me => {
                // Fetched for a session that was replaced meanwhile.
                false
            }
            Fetched::Discovered { found, started, .. } => match found {
                Ok((ids, mark)) => {
                    let now = Instant::now();
                    // A full look, or a wake-up while it ran (it may have
                    // read before that work was committed): look again.
                    let next = if ids.len() >= DISCOVER || self.woken >= started {
                        now
                    } else {
                        now + self.ctx.config.dispatch.poll_interval
                    };
                    let held = &self.held.versions;
                    let (mine, new): (Vec<PartitionId>, Vec<PartitionId>) =
                        ids.into_iter().partition(|p| held.contains_key(p));
                    self.rotation.discovered(mine, mark, next);
                    self.claims.saw(new);
                    self.ctx.health.polled(Poll::Discover, None);
                    true
                }
                Err(e) => {
                    polling_failed(&self.ctx.health, Poll::Discover, &e);
                    false
                }
            },
            Fetched::Items {
                asks,
                want,
                started,
                items,
                ..
            } => match items {
                Ok(items) => {
                    self.ctx.health.polled(Poll::Items, None);
                    self.take_in(&parts, &settled, &asks, want, started, items)
                }
                Err(e) => {
                    polling_failed(&self.ctx.health, Poll::Items, &e);
                    for p in parts {
                        self.rotation.offer(p);
                    }
                    false
                }
            },
        }
    }

    /// Buffers the fetched items that are not known here, interleaved by
    /// partition, leaving out those `settled` while it ran; true when some
    /// partition ran dry. Only partitions still
    /// in `parts` count: one lost or changed by someone else while it was
    /// fetched (an acquire cycle took it out) is left to its gate check.
    fn take_in(
        &mut self,
        parts: &HashSet<PartitionId>,
        settled: &HashSet<ItemKey>,
        asks: &[(Ask, usize)],
        want: usize,
        started: Instant,
        items: Vec<ReadyItem>,
    ) -> bool {
        let buffered: HashSet<ItemKey> = self.buffer.iter().map(|i| i.fence.key()).collect();
        let mut by_partition: HashMap<PartitionId, VecDeque<ReadyItem>> = HashMap::new();
        // Rows read per partition (without a time, then scheduled), and
        // the last one without a time's place in write order.
        let mut rows: HashMap<PartitionId, Read> = HashMap::new();
        for item in items {
            let read = rows.entry(item.fence.partition_id.clone()).or_default();
            if item.scheduled {
                read.due += 1;
            } else {
                read.now += 1;
                read.last = read.last.max(item.seq);
            }
            let id = &item.fence.key();
            if self.calls.in_flight.contains_key(id)
                || settled.contains(id)
                || buffered.contains(id)
                || self.cooling.contains_key(id)
            {
                continue;
            }
            by_partition
                .entry(item.fence.partition_id.clone())
                .or_default()
                .push_back(item);
        }
        // A partition that returned all it was asked for (or was held back
        // by its cap) probably has more: it stays in the rotation, and its
        // next read starts after the last row of this one.
        let mut dry = false;
        let fresh = self.ctx.config.dispatch.poll_interval;
        for (ask, room) in asks {
            let p = &ask.partition;
            let read = rows.get(p).copied().unwrap_or_default();
            // Both ranges may bring new items: no more than the partition's
            // room (its share, within its cap) is taken, the first written
            // first; it keeps its turn for the rest, without a floor.
            let trimmed = by_partition.get_mut(p).is_some_and(|q| {
                let over = q.len() > *room;
                q.truncate(*room);
                over
            });
            if !parts.contains(p) {
                by_partition.remove(p);
                self.floors.forget(p);
            } else if trimmed {
                self.floors.forget(p);
                self.rotation.offer(p.clone());
            } else if read.now >= ask.n {
                self.floors.read(p, ask.after, read.last, started, fresh);
                self.rotation.offer(p.clone());
            } else if read.due >= ask.due {
                // More scheduled items came due than were read; the items
                // without a time were all read, so no floor.
                self.floors.forget(p);
                self.rotation.offer(p.clone());
            } else {
                // Out of ready work at its gate: a gate check finds out
                // why (advance, close, or wait) once nothing is in flight.
                // After a floor too: the check reads the partition whole,
                // and one with an item ready before the floor goes back to
                // the rotation without one.
                self.floors.forget(p);
                self.held.marked.insert(p.clone());
                dry = true;
            }
        }
        let got: usize = rows.values().map(|r| r.now + r.due).sum();
        self.spread = if dry {
            (want * asks.len()).div_ceil(got.max(1)).min(MAX_SPREAD)
        } else {
            1
        };
        // Interleave: one item of each partition, then the next round.
        let mut fetched = 0;
        let mut rounds: Vec<VecDeque<ReadyItem>> = asks
            .iter()
            .filter_map(|(ask, _)| by_partition.remove(&ask.partition))
            .collect();
        while !rounds.is_empty() {
            rounds.retain_mut(|q| match q.pop_front() {
                Some(item) => {
                    self.buffer.push_back(item);
                    fetched += 1;
                    true
                }
                None => false,
            });
        }
        self.more = fetched >= want || !self.rotation.is_empty();
        dry
    }
}

/// What one refill read of a partition.
#[derive(Clone, Copy)]
struct Read {
    /// Items without a time.
    now: usize,
    /// Scheduled items whose time has come.
    due: usize,
    /// The place in write order of the last item without a time.
    last: i64,
}

impl Default for Read {
    fn default() -> Self {
        Read {
            now: 0,
            due: 0,
            last: i64::MIN,
        }
    }
}

/// Logs a failed refill at a bounded rate (it is retried after the poll
/// interval; a database that is down fails every one), and counts it for
/// readiness.
fn polling_failed(health: &crate::server::Health, kind: Poll, e: &crate::Error) {
    health.polled(kind, Some(format!("polling for items failed: {e}")));
    static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
    if let Some(n) = LOG.due() {
        tracing::warn!(error = %e, failures = n, "polling for items failed; will retry");
    }
}
