//! Leasing and balancing partitions across live sessions.
//!
//! Each acquire cycle a processor learns which partitions it still holds
//! (and which of them a gate check would act on), then aims for its share
//! of the P active partitions among S live sessions: ceil(P/S) when no
//! session is capped, else the level that covers P once capped sessions
//! hold only up to their `--max-partitions`. It takes
//! free partitions first (those with work first), else one stolen per cycle from
//! the most-loaded session when that one is above target or holds at least
//! two more than this processor. (Ceil targets alone can leave one processor
//! short: with 61 partitions and 3 sessions, 21 + 21 + 19 satisfies "no one
//! above 21"; the second rule evens it to 21 + 20 + 20, i.e. everyone holds
//! floor(P/S) or ceil(P/S), and since a thief never ends above its victim,
//! partitions do not ping-pong.) Every change of owner is an OCC write, so
//! two processors can never both believe they won the same lease. The number
//! of statements per cycle does not grow with the partitions held. A capped
//! processor at its cap gives back idle partitions while others with work
//! wait unleased.
//!
//! Between cycles, a **claim** leases at once the partitions that new work
//! was written to while nobody holds them (a new or reopened partition),
//! when this processor holds less than its share would be with one more
//! partition: one bounded statement, OCC as every lease, so processors
//! racing for one new partition leave it to exactly one of them.
//!
//! Inside: `full` (a full cycle, and the steps of a large lease), `take`
//! (taking free partitions, stealing one, claiming), `target` (this
//! session's share) and `held` (the dispatch loop taking in a cycle's
//! findings).

mod full;
mod held;
mod take;
mod target;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::context::Leasing;
use crate::ids::{PartitionId, SessionId};
use crate::store::HeldRow;
use crate::store::limits::Attrs;

/// What this processor holds, as the dispatch loop tracks it. Only the
/// loop changes it, when an acquire cycle or a gate check has finished.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Partition id → version as last seen.
    pub versions: HashMap<PartitionId, i64>,
    /// Partitions whose gate must be checked: run dry in a refill, written
    /// to while out of the rotation, changed by someone else, or found
    /// stuck by the acquire cycle.
    pub marked: HashSet<PartitionId>,
    /// Where the acquire cycle stands; taken by a cycle while it runs.
    pub cursors: Cursors,
    /// Flow-control columns of held partitions that set any, as last seen.
    pub attrs: HashMap<PartitionId, Attrs>,
    /// This session's target with one more active partition, as the last
    /// full cycle counted: a claim takes no more than that (None: no full
    /// cycle yet).
    pub share: Option<i64>,
}

impl Held {
    /// How many partitions a claim may take now: up to the share, one
    /// before any full cycle has counted.
    pub(crate) fn room(&self) -> usize {
        let held = self.versions.len() as i64;
        self.share.map_or(1, |s| (s - held).max(0) as usize)
    }
}

/// Where the acquire cycle's sweeps and steps stand between cycles.
#[derive(Debug, Default)]
pub(crate) struct Cursors {
    /// Where the next slice of the probe sweep starts (ids in order, wrapping).
    sweep: PartitionId,
    /// Where the next slice of the stranded sweep over `complete`
    /// partitions starts.
    stranded: PartitionId,
    /// Free partitions the last full cycle still wants to take, in steps.
    steps: usize,
    /// Where the next step's page of free partitions starts (ids in order),
    /// so that steps do not read again past the ones already leased.
    cursor: PartitionId,
    /// When the planner's statistics were last looked at, and how many
    /// times.
    statistics: Option<(Instant, u32)>,
    /// When the backlog gauge was last counted.
    backlog: Option<Instant>,
}

/// What an acquire cycle found and did, for the dispatch loop to take in.
/// It runs beside dispatch, so it changes nothing the loop owns: the loop
/// applies this when the cycle ends (also after an error, with what was
/// done until then).
#[derive(Debug, Default)]
pub(crate) struct Cycle {
    /// The cursors, to be put back.
    pub cursors: Cursors,
    /// This cycle's slice of held partitions, with their probes.
    slice: Vec<HeldRow>,
    /// The id range that slice covers (None: the slice was not read).
    swept: Option<Swept>,
    /// Idle partitions given back to make room.
    released: Vec<PartitionId>,
    /// Partitions leased (free ones, or one stolen), with their new versions.
    took: Vec<(PartitionId, i64)>,
    /// The flow-control columns of those leased that set any.
    took_attrs: Vec<Attrs>,
    /// More free partitions wait than one cycle takes: run the next soon.
    more: bool,
    /// A full cycle's target with one more active partition (see
    /// [`Held::share`]).
    share: Option<i64>,
    /// The statement that cut the cycle short.
    pub error: Option<crate::Error>,
}

/// The ids a slice of the sweep covers: after `after`, through `through`
/// (None: to the end). A held partition in that range that the slice did
/// not return is no longer held.
#[derive(Debug, Default)]
struct Swept {
    after: PartitionId,
    through: Option<PartitionId>,
}

impl Swept {
    fn covers(&self, id: &str) -> bool {
        id > self.after.as_str() && self.through.as_deref().is_none_or(|t| id <= t)
    }
}

/// What an acquire cycle changed, as the dispatch loop acts on it.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// More free partitions wait than one cycle takes: run the next soon.
    pub more: bool,
    /// Partitions that join the rotation: those just leased (a refill
    /// finds out whether they have work at their gate; one that has none is
    /// checked once it leaves the rotation), and held partitions of this
    /// cycle's slice with work ready now (work that no event announced,
    /// such as a retry whose backoff ended, is found this way).
    pub ready: Vec<PartitionId>,
    /// Held partitions someone else changed: items fetched before are not
    /// delivered.
    pub changed: Vec<PartitionId>,
    /// Partitions no longer held.
    pub lost: Vec<PartitionId>,
    /// Held partitions whose flow-control columns changed (None: unset).
    pub attrs: Vec<(PartitionId, Option<Attrs>)>,
}

/// One acquire cycle for session `me`, which holds `held` partitions;
/// `idle` may be given back at the cap (held, nothing here in flight).
pub(crate) async fn cycle(
    ctx: &Leasing<'_>,
    me: &SessionId,
    cursors: Cursors,
    held: usize,
    busy: &HashSet<PartitionId>,
) -> Cycle {
    let mut out = Cycle {
        cursors,
        ..Cycle::default()
    };
    let done = if out.cursors.steps > 0 {
        full::step(ctx, me, &mut out).await
    } else {
        full::full(ctx, me, held, busy, &mut out).await
    };
    finish(ctx, out, done).await
}

/// A claim for session `me`: new work was written to `seen` partitions
/// nobody here holds, and it may take up to `room` more. Takes up to
/// that many unowned partitions in one statement, nothing else; `more`
/// when it took all it asked for and more were seen (a burst: a full
/// cycle follows at once and shares them out).
pub(crate) async fn claim(
    ctx: &Leasing<'_>,
    me: &SessionId,
    cursors: Cursors,
    seen: usize,
    room: usize,
) -> Cycle {
    let mut out = Cycle {
        cursors,
        ..Cycle::default()
    };
    let want = seen.min(room);
    let done = take::claim(ctx, me, want, &mut out).await;
    out.more = out.took.len() == want && seen > want;
    finish(ctx, out, done).await
}

/// While dispatch gives its partitions back (the handler has been away
/// for long), the only acquire: one free partition with work ready, to
/// probe the handler with (or one whose gate must move on). Nothing else
/// (no reaping, no counts): the processors that deliver do that.
/// With `steal`, when none is free it steals one, as a cycle evening the
/// shares out would (from the most-loaded session, if it holds two or
/// more).
pub(crate) async fn probe_cycle(
    ctx: &Leasing<'_>,
    me: &SessionId,
    cursors: Cursors,
    steal: bool,
) -> Cycle {
    let mut out = Cycle {
        cursors,
        ..Cycle::default()
    };
    let mut done = take::take_one(ctx, me, &mut out).await;
    if done.is_ok() && out.took.is_empty() && steal {
        done = take::steal_one(ctx, me, 0, &mut out).await;
    }
    finish(ctx, out, done).await
}

/// Reads the flow-control columns of the partitions just leased, and
/// records the error that cut the cycle short.
async fn finish(ctx: &Leasing<'_>, mut out: Cycle, done: crate::Result<()>) -> Cycle {
    let done = match done {
        Ok(()) if !out.took.is_empty() => {
            let ids: Vec<PartitionId> = out.took.iter().map(|(id, _)| id.clone()).collect();
            ctx.store
                .partition_attrs(&ids)
                .await
                .map(|a| out.took_attrs = a)
        }
        other => other,
    };
    out.error = done.err();
    out
}
