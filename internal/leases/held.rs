//! What the dispatch loop does with an acquire cycle's findings: the held
//! set takes in what was leased, changed, given back or lost, so that only
//! the loop ever changes it.

use std::collections::{HashMap, HashSet};

use super::{Applied, Cycle, Held, Swept};
use crate::ids::PartitionId;
use crate::metrics::Metrics;
use crate::store::HeldRow;
use crate::store::limits::Attrs;

impl Held {
    /// Takes in what an acquire cycle found and did; `busy` are the
    /// partitions with items in flight or buffered here now.
    pub(crate) fn apply(
        &mut self,
        cycle: Cycle,
        busy: &HashSet<PartitionId>,
        metrics: &Metrics,
    ) -> Applied {
        self.cursors = cycle.cursors;
        self.share = cycle.share.or(self.share);
        let mut out = Applied {
            more: cycle.more,
            ..Applied::default()
        };
        if let Some(swept) = &cycle.swept {
            self.lost_from(&cycle.slice, swept, &mut out, metrics);
        }
        for r in &cycle.slice {
            let set = r.tenant.is_some() || r.weight.is_some() || r.max_in_flight.is_some();
            let attrs = (set || r.priority != 0).then(|| Attrs {
                id: r.id.clone(),
                tenant: r.tenant.clone(),
                weight: r.weight,
                max_in_flight: r.max_in_flight,
                priority: r.priority,
            });
            self.set_attrs(&r.id, attrs, &mut out);
            if self.versions.get(&r.id) != Some(&r.version) {
                self.versions.insert(r.id.clone(), r.version);
                self.marked.insert(r.id.clone());
                out.changed.push(r.id.clone());
            }
            if r.stuck && !busy.contains(&r.id) {
                self.marked.insert(r.id.clone());
            }
            if r.ready {
                out.ready.push(r.id.clone());
            }
        }
        for id in cycle.released {
            self.versions.remove(&id);
            self.marked.remove(&id);
            self.attrs.remove(&id);
        }
        let mut took_attrs: HashMap<PartitionId, Attrs> = cycle
            .took_attrs
            .into_iter()
            .map(|a| (a.id.clone(), a))
            .collect();
        for (id, version) in cycle.took {
            self.versions.insert(id.clone(), version);
            let attrs = took_attrs.remove(&id);
            self.set_attrs(&id, attrs, &mut out);
            out.ready.push(id);
        }
        for id in &out.lost {
            self.attrs.remove(id);
        }
        metrics.partitions_held.set(self.versions.len() as i64);
        out
    }

    /// Forgets every held partition (all were given back); returns them.
    pub(crate) fn release_all(&mut self, metrics: &Metrics) -> Vec<PartitionId> {
        self.marked.clear();
        self.attrs.clear();
        metrics.partitions_held.set(0);
        self.versions.drain().map(|(id, _)| id).collect()
    }

    /// Records a partition's flow-control columns, reporting a change.
    fn set_attrs(&mut self, id: &PartitionId, attrs: Option<Attrs>, out: &mut Applied) {
        let changed = match &attrs {
            Some(a) => self.attrs.insert(id.clone(), a.clone()).as_ref() != Some(a),
            None => self.attrs.remove(id).is_some(),
        };
        if changed {
            out.attrs.push((id.clone(), attrs));
        }
    }

    /// Drops the held partitions in the range a slice covers that it did
    /// not return (reported in `out.lost`).
    fn lost_from(
        &mut self,
        slice: &[HeldRow],
        swept: &Swept,
        out: &mut Applied,
        metrics: &Metrics,
    ) {
        let seen: HashSet<&str> = slice.iter().map(|r| r.id.as_str()).collect();
        let marked = &mut self.marked;
        self.versions.retain(|id, _| {
            let kept = !swept.covers(id) || seen.contains(id.as_str());
            if !kept {
                tracing::info!(partition = %id, "lost partition (taken by another processor, released or closed by someone else)");
                metrics.leases_lost.inc();
                marked.remove(id);
                out.lost.push(id.clone());
            }
            kept
        });
    }
}
