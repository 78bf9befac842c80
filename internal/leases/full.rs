//! A full acquire cycle, and the steps that continue a large lease. A
//! full cycle reaps dead sessions, probes one slice of the held
//! partitions, counts in one statement what the decision needs, then
//! gives back, takes or steals toward this session's target.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::take::{steal_one, take_free};
use super::target::target;
use super::{Cursors, Cycle, Swept};
use crate::Result;
use crate::context::Leasing;
use crate::ids::{PartitionId, SessionId};
use crate::store::{LeaseCounts, STRANDED_SLICE};

/// Full sweeps of the held partitions' probes take at most this many
/// acquire cycles (30 s at the default `--acquire-interval` of 2 s).
const SWEEP_CYCLES: usize = 15;

/// The smallest slice of held partitions probed per cycle.
const MIN_SLICE: usize = 1_000;

/// Partitions taken per step at most. A cycle that wants more takes the
/// rest in steps that only lease (no counts, no probes), each soon after
/// the last, so a large backlog is leased in bounded steps while dispatch
/// goes on between them.
const TAKE_PER_STEP: usize = 2_000;

/// Partitions one cycle's steps take at most before a full cycle counts
/// again (another processor may have started meanwhile).
const TAKE_PER_CYCLE: usize = 20_000;

/// For its first this many full cycles a processor looks at the statistics
/// every time: PostgreSQL publishes a table's change counts up to a second
/// late, so a look right after a bulk load can miss it.
const STATISTICS_FIRST: u32 = 5;

/// How often the acquire cycle looks whether PostgreSQL's statistics lag
/// behind a bulk load (first at the first cycle).
const STATISTICS_EVERY: Duration = Duration::from_secs(60);

/// The backlog gauge is counted at most this often: the count reads up to
/// `COUNT_CAP` index entries (on MySQL/MariaDB also the entries completed
/// items leave until purge removes them), and it only informs.
const BACKLOG_EVERY: Duration = Duration::from_secs(30);

/// A full cycle: reap, probe a slice, count, then lease, release or steal.
pub(super) async fn full(
    ctx: &Leasing<'_>,
    me: &SessionId,
    held: usize,
    busy: &HashSet<PartitionId>,
    out: &mut Cycle,
) -> Result<()> {
    reap(ctx).await?;
    analyze_when_lagging(ctx, &mut out.cursors).await?;
    let c = &out.cursors;
    let backlog = c.sweep.is_empty() && c.backlog.is_none_or(|t| t.elapsed() >= BACKLOG_EVERY);
    probe_slice(ctx, me, held, out).await?;
    let counts = count(ctx, me, held, backlog, &mut out.cursors).await?;
    // What this session holds is known here: a partition lost to someone
    // else (stolen, cancelled, closed by hand) is found missing from its
    // slice within one sweep, and meanwhile only makes this session take
    // a little less.
    let mine = held as i64;
    let cap = ctx.leases.max_partitions.map(|c| c as i64);
    let (want, share) = wanted(ctx, &counts, cap, mine).await?;
    out.share = Some(share);
    let released = make_room(ctx, me, cap, mine, busy, out).await?;
    let (want, mine) = (want + released, mine - released);
    if want <= 0 {
        return Ok(());
    }
    let took = take_wanted(ctx, me, want, out).await?;
    if want > took && !out.more {
        steal_one(ctx, me, mine + took, out).await?;
    }
    Ok(())
}

/// Deletes the sessions that stopped heartbeating, whoever's they were.
async fn reap(ctx: &Leasing<'_>) -> Result<()> {
    let reaped = ctx.store.reap_sessions(ctx.leases.session_expiry).await?;
    if reaped > 0 {
        tracing::info!(sessions = reaped, "deleted dead sessions");
    }
    Ok(())
}

/// At the first cycles and then at most every [`STATISTICS_EVERY`], has
/// the planner's statistics refreshed when they lag far behind a bulk
/// load, which would otherwise plan every statement for a tiny table.
async fn analyze_when_lagging(ctx: &Leasing<'_>, c: &mut Cursors) -> Result<()> {
    let looks = c.statistics.map_or(0, |(_, n)| n);
    if c.statistics
        .is_none_or(|(last, n)| n < STATISTICS_FIRST || last.elapsed() >= STATISTICS_EVERY)
    {
        c.statistics = Some((Instant::now(), looks.saturating_add(1)));
        if ctx.store.refresh_statistics().await? {
            tracing::info!(
                "analyzed feed_partitions and feed_items: the planner's statistics lagged far behind their rows (a bulk load)"
            );
        }
    }
    Ok(())
}

/// Reads the next slice of the held partitions with their probes.
///
/// Level-triggered fan-in: whatever happened (a result written by a
/// former owner, an item deleted or completed by hand), a held partition
/// that a gate check would act on is checked again. The probes, and the
/// comparison of versions (a change by someone else: enqueue, retry, an
/// operator control), run on one slice per cycle, so every partition is
/// seen within SWEEP_CYCLES cycles.
async fn probe_slice(
    ctx: &Leasing<'_>,
    me: &SessionId,
    held: usize,
    out: &mut Cycle,
) -> Result<()> {
    let c = &mut out.cursors;
    let slice = (held / SWEEP_CYCLES).max(MIN_SLICE);
    out.slice = ctx.store.held_slice(me, &c.sweep, slice).await?;
    let through = out
        .slice
        .last()
        .filter(|_| out.slice.len() >= slice)
        .map(|last| last.id.clone());
    let after = std::mem::replace(&mut c.sweep, through.clone().unwrap_or_default());
    out.swept = Some(Swept { after, through });
    Ok(())
}

/// Counts what the decision needs in one statement (`lease_counts`), sets
/// the gauges, and reopens `complete` partitions of this cycle's stranded
/// slice that have available items.
async fn count(
    ctx: &Leasing<'_>,
    me: &SessionId,
    held: usize,
    backlog: bool,
    c: &mut Cursors,
) -> Result<LeaseCounts> {
    let store = &ctx.store;
    let expiry = ctx.leases.session_expiry;
    let counts = store
        .lease_counts(me, held as i64, expiry, &c.stranded, backlog)
        .await?;
    ctx.metrics.sessions_alive.set(counts.sessions);
    if backlog {
        // Holding nothing, the count read nothing: the next cycle counts
        // what it leased rather than wait out the interval.
        if held > 0 {
            c.backlog = Some(Instant::now());
        }
        ctx.metrics.backlog.set(counts.backlog);
    }
    let end = counts.stranded_end.clone().unwrap_or_default();
    if counts.stranded > 0 {
        let n = store.reopen_stranded(&c.stranded, &end).await?;
        tracing::info!(
            partitions = n,
            "reopened complete partitions that had available items (added with plain SQL)"
        );
    }
    // The next slice; a short one was the last, so the sweep wraps.
    c.stranded = if counts.stranded_slice >= STRANDED_SLICE {
        end
    } else {
        PartitionId::default()
    };
    Ok(counts)
}

/// How many more partitions this session should hold (negative: fewer),
/// from its target among the live sessions and their caps; and its
/// target with one more active partition, which claims go up to.
async fn wanted(
    ctx: &Leasing<'_>,
    counts: &LeaseCounts,
    cap: Option<i64>,
    mine: i64,
) -> Result<(i64, i64)> {
    let caps = if counts.capped > 0 {
        ctx.store.session_caps(ctx.leases.session_expiry).await?
    } else {
        vec![]
    };
    let one_more = LeaseCounts {
        active: counts.active + 1,
        ..counts.clone()
    };
    Ok((
        target(counts, &caps, cap) - mine,
        target(&one_more, &caps, cap),
    ))
}

/// At the cap, makes room: gives back partitions with nothing to do while
/// partitions with work wait unleased. Returns how many it gave back.
async fn make_room(
    ctx: &Leasing<'_>,
    me: &SessionId,
    cap: Option<i64>,
    mine: i64,
    busy: &HashSet<PartitionId>,
    out: &mut Cycle,
) -> Result<i64> {
    let store = &ctx.store;
    let free_ready = match cap {
        Some(cap) if mine >= cap => store.free_ready(ctx.leases.session_expiry, cap).await?,
        _ => 0,
    };
    let mut released = 0;
    if free_ready > 0 {
        let idle = out
            .slice
            .iter()
            .filter(|r| !r.ready && !r.stuck && !busy.contains(&r.id));
        for r in idle.take(free_ready as usize) {
            if store.release(&r.id, r.version, me).await? {
                tracing::info!(partition = %r.id, "released an idle partition to make room for one with work");
                out.released.push(r.id.clone());
                released += 1;
            }
        }
    }
    Ok(released)
}

/// Takes up to [`TAKE_PER_STEP`] of the `want` free partitions now, and
/// leaves the rest (up to [`TAKE_PER_CYCLE`]) to the steps that follow.
/// Returns how many it took.
async fn take_wanted(ctx: &Leasing<'_>, me: &SessionId, want: i64, out: &mut Cycle) -> Result<i64> {
    out.cursors.cursor = PartitionId::default();
    let allowed = (want as usize).min(TAKE_PER_STEP);
    let took = take_free(ctx, me, out, allowed).await?;
    let left = want - took as i64;
    if took == allowed && left > 0 {
        out.cursors.steps = (left as usize).min(TAKE_PER_CYCLE - allowed);
        out.more = true;
    }
    Ok(took as i64)
}

/// One step of a large lease: takes the next free partitions, nothing else.
pub(super) async fn step(ctx: &Leasing<'_>, me: &SessionId, out: &mut Cycle) -> Result<()> {
    let allowed = out.cursors.steps.min(TAKE_PER_STEP);
    let took = take_free(ctx, me, out, allowed).await;
    let all = took.as_ref().is_ok_and(|n| *n == allowed);
    out.cursors.steps = if all { out.cursors.steps - allowed } else { 0 };
    // The last step is followed at once by a full cycle, which counts
    // again and takes more if more are wanted.
    out.more = all;
    took.map(|_| ())
}
