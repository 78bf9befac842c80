//! Fan-in: moving a partition past a gate, closing it, or failing it.
//!
//! A held partition is checked when it may have run dry: newly leased,
//! changed by someone else, after one of its results was written and none of
//! its items are in flight, or when the acquire cycle's level-triggered view
//! says a check would act on it (so changes made by hand are noticed too).
//! All checked partitions are read in one statement, whatever their
//! number. A partition stays marked until its check succeeded, so a failed
//! statement only delays it.

use std::collections::HashSet;

use crate::Result;
use crate::leases::Held;
use crate::metrics::Metrics;
use crate::store::{GateProbe, HeldPartition, Store};

/// Partitions read per check at most.
const CHECK_CHUNK: usize = 500;

/// What a gate check learned.
#[derive(Debug, Default)]
pub struct Checked {
    /// Partitions with work at their gate (found waiting, or just
    /// advanced): they join the rotation, and the loop polls at once.
    pub ready: Vec<String>,
    /// The check read a full chunk: more partitions may wait for one.
    pub more: bool,
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
        GateProbe::Idle => Decision::Hold,
        GateProbe::Unrunnable => Decision::FailUnrunnable,
        GateProbe::Blocked => Decision::Fail,
        GateProbe::Next(Some(_)) if p.manual_checkpoint => Decision::Hold,
        GateProbe::Next(Some(g)) => Decision::Advance(g),
        GateProbe::Next(None) if p.auto_close => Decision::Close,
        GateProbe::Next(None) => Decision::Hold,
    }
}

/// What a gate check works with: the store and the counters it moves.
pub struct Fanin<'a> {
    store: &'a Store,
    metrics: &'a Metrics,
}

impl<'a> Fanin<'a> {
    /// Borrows what a gate check needs.
    pub fn new(store: &'a Store, metrics: &'a Metrics) -> Self {
        Self { store, metrics }
    }
}

/// Checks the dirty partitions of `held` for which `skip` is false (those
/// with items in flight here, or still waiting in the rotation: a check
/// would only find work at their gate).
pub async fn check(
    fanin: &Fanin<'_>,
    me: &str,
    held: &mut Held,
    skip: impl Fn(&str) -> bool,
) -> Result<Checked> {
    let ids: Vec<String> = held
        .dirty
        .iter()
        .filter(|id| !skip(id))
        .take(CHECK_CHUNK)
        .cloned()
        .collect();
    let mut out = Checked {
        more: ids.len() == CHECK_CHUNK,
        ..Checked::default()
    };
    if ids.is_empty() {
        return Ok(out);
    }
    let store = fanin.store;
    // Until a partition's check has succeeded its mark stays: an error
    // anywhere below returns with the remaining marks intact.
    let parts = store.partitions_for_check(me, &ids).await?;
    let present: HashSet<&str> = parts.iter().map(|(p, _)| p.id.as_str()).collect();
    for id in &ids {
        if !present.contains(id.as_str()) {
            held.dirty.remove(id);
            if held.versions.remove(id).is_some() {
                tracing::info!(partition = %id, "lost partition (taken by another processor, released or closed by someone else)");
                fanin.metrics.leases_lost.inc();
            }
        }
    }
    let mut closing = Vec::new();
    for (p, probe) in &parts {
        let decision = decide(p, *probe);
        if apply(fanin, me, held, p, decision, &mut out, &mut closing).await? {
            held.dirty.remove(&p.id);
        }
        // Otherwise someone changed it meanwhile (OCC), items were just
        // failed, or it waits for the batched close below: it stays marked.
    }
    // Closes are the common end of small partitions: one statement for all.
    for id in store.close_partitions(&closing, me).await? {
        tracing::info!(partition = %id, "partition complete");
        fanin.metrics.partitions_closed.inc();
        held.versions.remove(&id);
        held.dirty.remove(&id);
    }
    fanin
        .metrics
        .partitions_held
        .set(held.versions.len() as i64);
    Ok(out)
}

/// Carries out one decision, except that a close joins `closing` (the
/// caller closes them all at once); true when the partition needs no new
/// look.
async fn apply(
    fanin: &Fanin<'_>,
    me: &str,
    held: &mut Held,
    p: &HeldPartition,
    decision: Decision,
    out: &mut Checked,
    closing: &mut Vec<HeldPartition>,
) -> Result<bool> {
    let store = fanin.store;
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
            let ok = store.advance_gate(p, me, g).await?;
            if ok {
                tracing::info!(partition = %p.id, from = p.gate, gate = g, "gate advanced");
                fanin.metrics.gate_advances.inc();
                held.versions.insert(p.id.clone(), p.version + 1);
                out.ready.push(p.id.clone());
            }
            Ok(ok)
        }
        Decision::Fail => {
            let ok = store.fail_partition(p, me).await?;
            if ok {
                held.versions.remove(&p.id);
                tracing::warn!(partition = %p.id, gate = p.gate, "partition failed: an item failed for good (on_failure = block); fix it and run `processor retry`");
                fanin.metrics.partitions_failed.inc();
            }
            Ok(ok)
        }
        Decision::Close => {
            closing.push(p.clone());
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OnFailure;

    fn part(gate: i64) -> HeldPartition {
        HeldPartition {
            id: "p".into(),
            gate,
            version: 1,
            auto_close: true,
            manual_checkpoint: false,
            on_failure: OnFailure::Block,
        }
    }

    #[test]
    fn decisions() {
        let p = part(1);
        assert_eq!(decide(&p, GateProbe::Waiting), Decision::Wait);
        assert_eq!(decide(&p, GateProbe::Idle), Decision::Hold);
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
