//! Fan-in: moving a partition past a gate, closing it, or failing it.
//!
//! A held partition is checked when it may have run dry: a refill found
//! no ready work at its gate, it was changed by someone else, one of its
//! results was written while it was out of the rotation, or the acquire cycle's level-triggered view
//! says a check would act on it (so changes made by hand are noticed too).
//! Marked partitions are read in chunks of [`CHECK_CHUNK`] per statement,
//! and a check runs beside dispatch, which keeps sending items meanwhile.
//! A partition stays marked until its check succeeded, so a failed
//! statement only delays it.

use std::collections::HashSet;
use std::time::Duration;

use tracing::Instrument;

use crate::Result;
use crate::context::Leasing;
use crate::ids::{PartitionId, SessionId};
use crate::leases::Held;
use crate::metrics::Metrics;
use crate::store::{GateProbe, HeldPartition};

/// Partitions read per check at most.
const CHECK_CHUNK: usize = 500;

/// What a gate check found and did. It runs beside dispatch, so it changes
/// nothing the loop owns: the loop applies this when the check ends (also
/// after an error, with what was done until then).
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Partitions with work at their gate (found waiting, or just
    /// advanced): they join the rotation, and the loop polls at once.
    pub ready: Vec<PartitionId>,
    /// The check read a full chunk: more partitions may wait for one.
    pub more: bool,
    /// Checked partitions that need no new look.
    settled: Vec<PartitionId>,
    /// Partitions this session no longer holds.
    missing: Vec<PartitionId>,
    /// Partitions that ended here (closed, failed).
    ended: Vec<PartitionId>,
    /// Partitions moved to a new gate, with their new versions.
    advanced: Vec<(PartitionId, i64)>,
    /// Idle partitions whose first scheduled item comes due after this
    /// long (by the database clock, as the check read it).
    pub waits: Vec<(PartitionId, Duration)>,
    /// The statement that cut the check short; its remaining partitions
    /// stay marked and are checked again.
    pub error: Option<crate::Error>,
}

/// What the probe of one partition calls for.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Items Feed cannot run (below the gate, unknown status) must be failed first.
    FailUnrunnable,
    /// Items are still available at the current gate.
    Wait,
    /// A failed item blocks fan-in (`on_failure = block`).
    Fail,
    /// Advance to the lowest gate with available items.
    Advance(i64),
    /// Nothing available is left: close.
    Close,
    /// Nothing to do now (paused, backing off, manual checkpoint, or
    /// `auto_close = false`).
    Hold,
}

fn decide(p: &HeldPartition, probe: GateProbe) -> Decision {
    match probe {
        GateProbe::Waiting => Decision::Wait,
        GateProbe::Idle(_) => Decision::Hold,
        GateProbe::Unrunnable => Decision::FailUnrunnable,
        GateProbe::Blocked => Decision::Fail,
        GateProbe::Next(Some(_)) if p.manual_checkpoint => Decision::Hold,
        GateProbe::Next(Some(g)) => Decision::Advance(g),
        GateProbe::Next(None) if p.auto_close => Decision::Close,
        GateProbe::Next(None) => Decision::Hold,
    }
}

/// The next partitions to check: marked in `held`, and not `skip`ped
/// (those with items in flight here, being fetched, or still waiting in
/// the rotation: a check would only find work at their gate).
pub(crate) fn due(held: &Held, skip: impl Fn(&str) -> bool) -> Vec<(PartitionId, i64)> {
    held.marked
        .iter()
        .filter(|id| !skip(id))
        .take(CHECK_CHUNK)
        // A version never written (-1) only makes the check read it.
        .map(|id| (id.clone(), held.versions.get(id).copied().unwrap_or(-1)))
        .collect()
}

/// Checks the partitions `due` (from [`due`], with the versions last seen)
/// of session `me`.
pub(crate) async fn check(
    ctx: &Leasing<'_>,
    me: &SessionId,
    due: Vec<(PartitionId, i64)>,
) -> Checked {
    let mut out = Checked {
        more: due.len() == CHECK_CHUNK,
        ..Checked::default()
    };
    if let Err(e) = run(ctx, me, &due, &mut out).await {
        out.error = Some(e);
    }
    out
}

async fn run(
    ctx: &Leasing<'_>,
    me: &SessionId,
    due: &[(PartitionId, i64)],
    out: &mut Checked,
) -> Result<()> {
    if due.is_empty() {
        return Ok(());
    }
    let store = &ctx.store;
    // Partitions whose every item is done close first, unread: what most
    // checks of small partitions come to. Until a partition's check has
    // succeeded its mark stays: an error anywhere below returns with the
    // remaining marks intact.
    let finished: HashSet<PartitionId> = store.close_finished(due, me).await?.into_iter().collect();
    for id in &finished {
        closed(ctx, id, out);
    }
    let ids: Vec<PartitionId> = due
        .iter()
        .filter(|(id, _)| !finished.contains(id))
        .map(|(id, _)| id.clone())
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let parts = store.partitions_for_check(me, &ids).await?;
    let present: HashSet<&str> = parts.iter().map(|(p, _)| p.id.as_str()).collect();
    out.missing = ids
        .iter()
        .filter(|id| !present.contains(id.as_str()))
        .cloned()
        .collect();
    let mut closing = Vec::new();
    for (p, probe) in &parts {
        if let GateProbe::Idle(Some(ms)) = probe {
            // At least a millisecond: the time was read a moment before.
            let ms = u64::try_from(*ms).unwrap_or(0).max(1);
            out.waits.push((p.id.clone(), Duration::from_millis(ms)));
        }
        let decision = decide(p, *probe);
        if apply(ctx, me, p, decision, out, &mut closing).await? {
            out.settled.push(p.id.clone());
        }
        // Otherwise someone changed it meanwhile (OCC), items were just
        // failed, or it waits for the batched close below: it stays marked.
    }
    // Closes are the common end of small partitions: one statement for all.
    for id in store.close_partitions(&closing, me).await? {
        closed(ctx, &id, out);
    }
    Ok(())
}

fn closed(ctx: &Leasing<'_>, id: &PartitionId, out: &mut Checked) {
    crate::otel::closed(id);
    tracing::info!(partition = %id, "partition complete");
    ctx.metrics.partitions_closed.inc();
    out.ended.push(id.clone());
}

/// Carries out one decision, except that a close joins `closing` (the
/// caller closes them all at once); true when the partition needs no new
/// look.
async fn apply(
    ctx: &Leasing<'_>,
    me: &SessionId,
    p: &HeldPartition,
    decision: Decision,
    out: &mut Checked,
    closing: &mut Vec<HeldPartition>,
) -> Result<bool> {
    let store = &ctx.store;
    let metrics = &ctx.metrics;
    match decision {
        Decision::Wait => {
            out.ready.push(p.id.clone());
            Ok(true)
        }
        Decision::Hold => Ok(true),
        Decision::FailUnrunnable => {
            let n = store.fail_unrunnable(p, me).await?;
            tracing::warn!(partition = %p.id, gate = p.gate, items = n, "failed items that can never run (below the partition's gate or with an unknown status); see their last_error");
            Ok(false)
        }
        Decision::Advance(g) => {
            let trace = crate::otel::advance(&p.id, p.gate, g);
            let ok = store.advance_gate(p, me, g).instrument(trace).await?;
            if ok {
                tracing::info!(partition = %p.id, from = p.gate, gate = g, "gate advanced");
                metrics.gate_advances.inc();
                out.advanced.push((p.id.clone(), p.version + 1));
                out.ready.push(p.id.clone());
            }
            Ok(ok)
        }
        Decision::Fail => {
            let ok = store.fail_partition(p, me).await?;
            if ok {
                out.ended.push(p.id.clone());
                tracing::warn!(partition = %p.id, gate = p.gate, "partition failed: an item failed for good (on_failure = block); fix it and run `processor retry`");
                metrics.partitions_failed.inc();
            }
            Ok(ok)
        }
        Decision::Close => {
            closing.push(p.clone());
            Ok(false)
        }
    }
}

impl Held {
    /// Takes in what a gate check found and did; returns the partitions
    /// that join the rotation and whether more marked ones wait.
    pub(crate) fn checked(&mut self, c: Checked, metrics: &Metrics) -> (Vec<PartitionId>, bool) {
        for id in &c.missing {
            self.marked.remove(id);
            if self.versions.remove(id).is_some() {
                tracing::info!(partition = %id, "lost partition (taken by another processor, released or closed by someone else)");
                metrics.leases_lost.inc();
            }
        }
        for id in &c.settled {
            self.marked.remove(id);
        }
        for id in &c.ended {
            self.marked.remove(id);
            self.versions.remove(id);
        }
        for (id, version) in c.advanced {
            self.versions.insert(id, version);
        }
        if let Some(e) = &c.error {
            static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
            if let Some(n) = LOG.due() {
                tracing::warn!(error = %e, failures = n, "gate check failed; its partitions stay marked and are checked again after a pause");
            }
        }
        metrics.partitions_held.set(self.versions.len() as i64);
        (c.ready, c.more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(gate: i64) -> HeldPartition {
        HeldPartition {
            id: "p".into(),
            gate,
            version: 1,
            auto_close: true,
            manual_checkpoint: false,
        }
    }

    #[test]
    fn decisions() {
        let p = part(1);
        assert_eq!(decide(&p, GateProbe::Waiting), Decision::Wait);
        assert_eq!(decide(&p, GateProbe::Idle(Some(5))), Decision::Hold);
        assert_eq!(decide(&p, GateProbe::Next(Some(3))), Decision::Advance(3));
        assert_eq!(decide(&p, GateProbe::Next(None)), Decision::Close);
        assert_eq!(decide(&p, GateProbe::Blocked), Decision::Fail);
        assert_eq!(decide(&p, GateProbe::Unrunnable), Decision::FailUnrunnable);
        let manual = HeldPartition {
            manual_checkpoint: true,
            ..part(1)
        };
        assert_eq!(decide(&manual, GateProbe::Next(Some(3))), Decision::Hold);
        assert_eq!(decide(&manual, GateProbe::Next(None)), Decision::Close);
        let open = HeldPartition {
            auto_close: false,
            ..part(1)
        };
        assert_eq!(decide(&open, GateProbe::Next(None)), Decision::Hold);
    }
}
