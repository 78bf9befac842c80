//! A processor whose dispatch has held off for longer than the session
//! expiry (the handler unreachable, the circuit breaker open) gives its
//! partitions back, as a processor that died would lose them, so that the
//! processors whose handler answers take them at once. Its heartbeat says
//! it takes none (a cap of 0), so the others' shares cover them. It does
//! so only while another live processor dispatches (holds nothing off):
//! when the handler is away for the whole fleet, giving partitions back
//! would only move them around (looked at once per session expiry). The
//! count is taken again once per session expiry while the partitions are
//! given back: when no other processor dispatches any more (the outage
//! has reached them too), this one takes its share again, still held off,
//! so that an outage of the whole fleet leaves the partitions spread as
//! before rather than with the processor that was first to hold off.
//!
//! It still needs items to probe its handler with: at each acquire tick
//! when a probe is due it takes one free partition (one with work ready
//! if any), sends one probe, and gives the partition back as soon as the
//! probe fails (or at the next tick when none could be sent; a gate check
//! due on it runs first). The first probe that reaches the handler ends
//! the hold-off: the cap is restored and acquire cycles take a share
//! again. While the others hold every partition, there is nothing free to
//! probe with: then, at most once per [`STEAL_EVERY`] session expiries,
//! it steals one as a processor below its share would (from one holding
//! two or more), so that a processor whose handler came back while its
//! peers held everything does not stay idle for good; a processor whose
//! handler stays away costs its peers one partition's answers in flight
//! that often.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{Dispatcher, Upkeep};
use crate::leases;

/// A probe may steal a partition once per this many session expiries.
const STEAL_EVERY: u32 = 6;

/// Whether the partitions are being given back, and whether the next
/// upkeep turn should give back what is held.
#[derive(Debug, Default)]
pub(super) struct Release {
    /// Dispatch has held off past the bound.
    pub(super) active: bool,
    /// What is held goes back at the next turn (a probe failed).
    pub(super) due: bool,
    /// When a probe may next steal a partition (none free).
    steal_at: Option<Instant>,
    /// When the peers that dispatch may next be counted.
    peers_at: Option<Instant>,
}

impl Dispatcher {
    /// Takes the upkeep turn while the partitions are given back: starts
    /// giving back what is held, or leasing one partition to probe with,
    /// in place of an acquire cycle. Begins giving back once dispatch has
    /// held off for longer than the session expiry. True when it started
    /// a task.
    pub(super) fn release_turn(&mut self) -> bool {
        let now = Instant::now();
        let bound = self.ctx.config.leases.session_expiry;
        if !self.release.active {
            let long = self
                .outage
                .since
                .is_some_and(|since| now.duration_since(since) >= bound);
            if !long {
                self.release.peers_at = None;
                return false;
            }
            // On an acquire tick, at most once per expiry: are there peers
            // to give the partitions to?
            if !self.pace.acquire_due || self.release.peers_at.is_some_and(|at| now < at) {
                return false;
            }
            self.pace.acquire_due = false;
            self.release.peers_at = Some(now + bound);
            self.start_peers();
            return true;
        }
        // At most once per expiry: does any peer still dispatch?
        if self.pace.acquire_due && self.release.peers_at.is_none_or(|at| now >= at) {
            self.pace.acquire_due = false;
            self.release.peers_at = Some(now + bound);
            self.start_peers();
            return true;
        }
        let tick = std::mem::take(&mut self.pace.acquire_due);
        let held = !self.held.versions.is_empty();
        if !held {
            self.release.due = false;
        }
        if held
            && (self.release.due || (tick && self.calls.in_flight.is_empty()))
            && !self.check_pending()
        {
            self.release.due = false;
            self.start_release();
            return true;
        }
        let probe_due = self.outage.until.is_none_or(|until| now >= until);
        if tick && !held && probe_due {
            let steal = self.release.steal_at.is_none_or(|at| now >= at);
            if steal {
                let every = self.ctx.config.leases.session_expiry * STEAL_EVERY;
                self.release.steal_at = Some(now + every);
            }
            self.start_probe_cycle(steal);
            return true;
        }
        false
    }

    /// Whether a gate check is due first: the probe may have failed the
    /// last item of its partition, and a partition nobody holds is not
    /// checked (closed) unless another processor takes it.
    fn check_pending(&self) -> bool {
        if self.held.marked.is_empty() {
            return false;
        }
        let busy = self.busy_partitions();
        self.held
            .marked
            .iter()
            .any(|p| !busy.contains(p) && !self.rotation.contains(p) && !self.fetching.contains(p))
    }

    /// Dispatch has held off since `since`, past the bound.
    fn begin_release(&mut self, since: Instant) {
        let every = self.ctx.config.leases.session_expiry * STEAL_EVERY;
        self.release = Release {
            active: true,
            due: true,
            steal_at: Some(Instant::now() + every),
            peers_at: None,
        };
        self.ctx.health.releasing.store(true, Ordering::Relaxed);
        let why = self.outage.why.clone();
        self.set_hold(&why, since);
        let held = Duration::from_secs(since.elapsed().as_secs());
        tracing::warn!(
            handler = %crate::store::redact(&self.ctx.config.handler.url),
            error = %why,
            held_off = %humantime::format_duration(held),
            partitions = self.held.versions.len(),
            "held off: releasing partitions: dispatch has held off for longer than --session-expiry, so other processors take them; one at a time is leased to probe the handler with"
        );
    }

    /// Partitions are taken again (`why`: the handler answers again, or no
    /// peer dispatches either).
    pub(super) fn end_release(&mut self, why: &str) {
        if std::mem::take(&mut self.release).active {
            self.ctx.health.releasing.store(false, Ordering::Relaxed);
            tracing::info!("{why}");
            self.pace.acquire.reset_immediately();
        }
    }

    /// Counts the live peers that dispatch, beside the loop.
    fn start_peers(&mut self) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        self.upkeep = Some(self.ctx.tasks.spawn("peers", async move {
            let expiry = ctx.config.leases.session_expiry;
            let peers = ctx.store.dispatching_peers(&me, expiry).await;
            Upkeep::Peers(me, peers)
        }));
    }

    /// Takes in the count of peers that dispatch: with any, and dispatch
    /// still held off, the partitions go back; with none while they are
    /// given back, a share is taken again.
    pub(super) fn peers(&mut self, peers: crate::Result<i64>) {
        match (peers, self.outage.since) {
            (Ok(n), Some(since)) if n > 0 && !self.release.active => self.begin_release(since),
            (Ok(0), Some(since)) if self.release.active => {
                self.end_release(
                    "no other processor dispatches either: taking partitions again, still held off",
                );
                let why = self.outage.why.clone();
                self.set_hold(&why, since);
            }
            (Err(e), _) => {
                tracing::warn!(error = %e, "counting the processors that dispatch failed; will retry")
            }
            _ => {}
        }
    }

    /// Gives every held partition back, beside the loop.
    fn start_release(&mut self) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        self.upkeep = Some(self.ctx.tasks.spawn("release", async move {
            let released = ctx.store.release_all(&me).await;
            Upkeep::Released(me, released)
        }));
    }

    /// Leases one partition to probe the handler with (`steal`: one held
    /// by another session when none is free).
    fn start_probe_cycle(&mut self, steal: bool) {
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let cursors = std::mem::take(&mut self.held.cursors);
        // No claims while giving partitions back: what they saw is dropped
        // here as an acquire cycle would.
        self.claims.cycle_started();
        self.upkeep = Some(self.ctx.tasks.spawn("probe lease", async move {
            let cycle = leases::probe_cycle(&ctx.leasing(), &me, cursors, steal).await;
            Upkeep::Cycle(me, cycle)
        }));
    }

    /// Takes in the partitions given back: nothing held is delivered
    /// any more (answers in flight are rejected as stale).
    pub(super) fn released(&mut self, released: crate::Result<u64>) {
        match released {
            Ok(n) => {
                let lost = self.held.release_all(&self.ctx.metrics);
                self.act_on_cycle(leases::Applied {
                    lost,
                    ..leases::Applied::default()
                });
                self.wakeups.clear();
                if n > 0 {
                    tracing::info!(
                        partitions = n,
                        "released partitions: the handler is away, other processors take them"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "releasing partitions failed; will retry");
                self.release.due = true;
            }
        }
    }
}
