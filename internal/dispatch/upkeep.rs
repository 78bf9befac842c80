//! Upkeep beside the loop: acquire cycles, claims and gate checks (one at
//! a time, all change what is held), what they bring back, partitions
//! whose scheduled work comes due, and a replaced session.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::{Instant, Interval};

use super::{CHECK_PAUSE_MAX, Dispatcher, Upkeep};
use crate::gates::{self, Checked};
use crate::ids::PartitionId;
use crate::leases::{self, Cycle, Held};

/// When the loop polls, checks gates and runs acquire cycles next.
pub(super) struct Pace {
    /// Acquire cycles' ticks; `acquire_due` once one has ticked.
    pub(super) acquire: Interval,
    pub(super) acquire_due: bool,
    pub(super) next_poll: Instant,
    /// Every slot is busy and more work is ready: partitions are not
    /// running dry, so gates are checked at most once per poll interval.
    pub(super) full: bool,
    next_check: Instant,
    /// A failed check is tried again after this pause, which grows while
    /// it keeps failing (its partitions stay marked): never back to back.
    check_pause: Duration,
    check_after: Instant,
    /// An acquire cycle just ended: marked partitions are checked before
    /// the next cycle, so back-to-back cycles cannot starve gate checks.
    pub(super) check_turn: bool,
}

impl Pace {
    pub(super) fn new(acquire_interval: Duration) -> Self {
        let mut acquire = tokio::time::interval(acquire_interval);
        acquire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let now = Instant::now();
        Pace {
            acquire,
            acquire_due: false,
            next_poll: now,
            full: false,
            next_check: now,
            check_pause: Duration::ZERO,
            check_after: now,
            check_turn: false,
        }
    }
}

impl Dispatcher {
    /// Starts an acquire cycle when one is due, else a claim when new
    /// partitions were seen, else a gate check when partitions are
    /// marked, unless one of them runs already (while the partitions are
    /// given back, `release_turn` stands in for acquire cycles and claims).
    pub(super) fn start_upkeep(&mut self) {
        if self.upkeep.is_some() || self.release_turn() {
            return;
        }
        let now = Instant::now();
        let turn = std::mem::take(&mut self.pace.check_turn);
        if turn && now >= self.pace.check_after && !self.held.marked.is_empty() {
            self.pace.next_check = now + self.ctx.config.dispatch.poll_interval;
            self.start_check();
            if self.upkeep.is_some() {
                return;
            }
        }
        if self.pace.acquire_due {
            self.pace.acquire_due = false;
            self.start_cycle();
        } else if (self.release.active || !self.start_claim())
            && (!self.pace.full || now >= self.pace.next_check)
            && now >= self.pace.check_after
            && !self.held.marked.is_empty()
        {
            self.pace.next_check = now + self.ctx.config.dispatch.poll_interval;
            self.start_check();
        }
    }

    /// Takes in what a gate check or an acquire cycle brought back.
    pub(super) fn upkeep_ended(&mut self, done: Result<Upkeep, tokio::task::JoinError>) -> bool {
        self.upkeep = None;
        match done {
            Ok(Upkeep::Cycle(me, cycle)) if me == self.me => {
                self.pace.check_turn = true;
                self.cycled(cycle)
            }
            Ok(Upkeep::Claim(me, cycle)) if me == self.me => {
                let failed = cycle.error.is_some();
                self.cycled(cycle);
                self.claimed(failed);
            }
            Ok(Upkeep::Check(me, checked)) if me == self.me => self.checked(checked),
            Ok(Upkeep::Released(me, released)) if me == self.me => self.released(released),
            Ok(Upkeep::Peers(me, peers)) if me == self.me => self.peers(peers),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "a gate check, claim or acquire cycle task failed; will retry")
            }
        }
        true
    }

    /// Takes in a gate check: partitions ready again join the rotation,
    /// those whose work waits for a time get a wake-up.
    fn checked(&mut self, mut checked: Checked) {
        let poll = self.ctx.config.dispatch.poll_interval;
        self.pace.check_pause = match checked.error {
            Some(_) => (self.pace.check_pause * 2).clamp(poll, CHECK_PAUSE_MAX),
            None => Duration::ZERO,
        };
        self.pace.check_after = Instant::now() + self.pace.check_pause;
        // Measured from the answer: never earlier than due.
        let now = Instant::now();
        for (p, wait) in std::mem::take(&mut checked.waits) {
            self.wakeups.set(p, now + wait);
        }
        let (ready, more) = self.held.checked(checked, &self.ctx.metrics);
        // A full chunk: the next one is checked at once.
        if more {
            self.pace.next_check = Instant::now();
        }
        if !ready.is_empty() {
            self.refill_at = Instant::now();
        }
        for p in ready {
            self.floors.forget(&p);
            self.rotation.offer(p);
        }
    }

    /// Adopts a new session id: every lease of the old one is gone.
    pub(super) fn sync_session(&mut self) {
        let id = self.ctx.session.id();
        if id != self.me {
            let lost = self.held.versions.len();
            tracing::warn!(old = %self.me, new = %id, partitions = lost, "session replaced; dropping every partition");
            self.ctx.metrics.leases_lost.inc_by(lost as u64);
            self.me = id;
            self.held = Held::default();
            self.wakeups.clear();
            self.buffer.clear();
            self.floors.clear();
            self.calls.partial_since = None;
            self.ctx.metrics.partitions_held.set(0);
        }
    }

    /// Serves the held partitions whose waiting work has come due: they
    /// join the rotation, and the next refill reads what is due.
    pub(super) fn woken(&mut self) -> bool {
        let now = Instant::now();
        for p in self.wakeups.due(now) {
            if self.held.versions.contains_key(&p) && !self.fetching.contains(&p) {
                self.floors.forget(&p);
                self.rotation.offer(p);
                self.refill_at = now;
            }
        }
        true
    }

    /// Starts an acquire cycle beside the loop.
    fn start_cycle(&mut self) {
        self.ctx.metrics.acquire_cycles.inc();
        self.claims.cycle_started();
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let cursors = std::mem::take(&mut self.held.cursors);
        let held = self.held.versions.len();
        let busy = self.busy_partitions();
        self.upkeep = Some(self.ctx.tasks.spawn("acquire cycle", async move {
            let cycle = leases::cycle(&ctx.leasing(), &me, cursors, held, &busy).await;
            Upkeep::Cycle(me, cycle)
        }));
    }

    /// Starts a gate check of the next marked partitions beside the loop
    /// (none when every marked one is busy here).
    fn start_check(&mut self) {
        let busy = self.busy_partitions();
        let (rotation, fetching) = (&self.rotation, &self.fetching);
        let skip = |p: &str| busy.contains(p) || rotation.contains(p) || fetching.contains(p);
        let ids = gates::due(&self.held, skip);
        if ids.is_empty() {
            return;
        }
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        self.upkeep = Some(self.ctx.tasks.spawn("gate check", async move {
            let checked = gates::check(&ctx.leasing(), &me, ids).await;
            Upkeep::Check(me, checked)
        }));
    }

    /// Takes in what an acquire cycle or a claim found and did.
    fn cycled(&mut self, mut cycle: Cycle) {
        if let Some(e) = cycle.error.take() {
            tracing::warn!(error = %e, "an acquire cycle or claim failed; will retry");
        }
        let busy = self.busy_partitions();
        let b = self.held.apply(cycle, &busy, &self.ctx.metrics);
        self.act_on_cycle(b);
        let now = Instant::now();
        self.cooling.retain(|_, until| *until > now);
        if !self.rotation.is_empty() {
            self.refill_at = now;
        }
    }

    /// Acts on what an acquire cycle changed.
    pub(super) fn act_on_cycle(&mut self, b: leases::Applied) {
        // More free partitions wait: the next step follows at once (it
        // runs beside dispatch, taking turns with gate checks).
        if b.more {
            self.pace.acquire.reset_immediately();
        }
        // Buffered items of partitions lost meanwhile, or changed by
        // someone else (paused, cancelled), are not delivered.
        if !b.changed.is_empty() || !b.lost.is_empty() {
            let gone: HashSet<&str> = b
                .changed
                .iter()
                .chain(&b.lost)
                .map(PartitionId::as_str)
                .collect();
            self.buffer
                .retain(|i| !gone.contains(i.fence.partition_id.as_str()));
            self.rotation.retain(|p| !gone.contains(p));
            self.fetching.retain(|p| !gone.contains(p.as_str()));
            for p in b.changed.iter().chain(&b.lost) {
                self.floors.forget(p);
            }
        }
        for (p, attrs) in &b.attrs {
            let tenant = attrs.as_ref().and_then(|a| a.tenant.as_ref());
            let priority = attrs.as_ref().map_or(0, |a| a.priority);
            self.rotation.set_attrs(p, tenant, priority);
        }
        for p in &b.lost {
            self.rotation.set_attrs(p, None, 0);
        }
        for p in b.ready {
            self.rotation.offer(p);
        }
    }

    /// Partitions with items in flight, buffered or cooling down here.
    pub(super) fn busy_partitions(&self) -> HashSet<PartitionId> {
        self.known_per_partition().into_keys().collect()
    }
}
