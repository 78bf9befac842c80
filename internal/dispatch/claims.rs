//! Claims: how an idle processor learns of a new partition at once. The
//! look at the items written since the last one (at once after a
//! notification or an enqueue through this processor's API, else every
//! `--poll-interval`) also names partitions nobody here holds; when this
//! processor has room below its share, a claim leases unowned partitions
//! right away (`leases::claim`) instead of leaving them to the next
//! acquire cycle. It costs nothing while nothing is written.
//!
//! Partitions a claim found held by another processor are remembered
//! until the next acquire cycle, so that new items in them start no
//! claim again: a processor pays at most one claim per look for another
//! processor's partitions.

use std::collections::HashSet;

use super::Dispatcher;
use crate::ids::PartitionId;
use crate::leases;

/// Partitions remembered as held elsewhere at most; beyond, the memory
/// starts over (the cost is one claim that takes nothing).
const OTHERS_MAX: usize = 10_000;

/// New partitions seen by the looks, waiting for a claim.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Seen since the last claim or acquire cycle started, not held here.
    seen: HashSet<PartitionId>,
    /// The ones the running claim was started for.
    claiming: HashSet<PartitionId>,
    /// Found held by another processor since the last acquire cycle.
    others: HashSet<PartitionId>,
}

impl Claims {
    /// Records partitions a look found new items in that are not held here.
    pub(super) fn saw(&mut self, ids: impl IntoIterator<Item = PartitionId>) {
        for id in ids {
            if !self.others.contains(&id) {
                self.seen.insert(id);
            }
        }
    }

    /// An acquire cycle starts: it takes free partitions itself, and a
    /// partition held elsewhere may have been given back since.
    pub(super) fn cycle_started(&mut self) {
        self.seen.clear();
        self.others.clear();
    }
}

impl Dispatcher {
    /// Starts a claim when new partitions were seen and this processor
    /// has room for one; true when it started one.
    pub(super) fn start_claim(&mut self) -> bool {
        if self.claims.seen.is_empty() {
            return false;
        }
        let room = self.held.room();
        let mut seen = std::mem::take(&mut self.claims.seen);
        // An acquire cycle may have taken some since they were seen.
        seen.retain(|p| !self.held.versions.contains_key(p));
        if room == 0 || seen.is_empty() {
            // At its share: the next acquire cycle balances.
            return false;
        }
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let cursors = std::mem::take(&mut self.held.cursors);
        let n = seen.len();
        self.claims.claiming = seen;
        self.upkeep = Some(self.ctx.tasks.spawn("claim", async move {
            let cycle = leases::claim(&ctx.leasing(), &me, cursors, n, room).await;
            super::Upkeep::Claim(me, cycle)
        }));
        true
    }

    /// After a claim is taken in: what it was started for and this
    /// processor still does not hold is held elsewhere (unless the claim
    /// failed: then the next acquire cycle sees to them).
    pub(super) fn claimed(&mut self, failed: bool) {
        let claiming = std::mem::take(&mut self.claims.claiming);
        if failed {
            return;
        }
        if self.claims.others.len() + claiming.len() > OTHERS_MAX {
            self.claims.others.clear();
        }
        let held = &self.held.versions;
        self.claims
            .others
            .extend(claiming.into_iter().filter(|p| !held.contains_key(p)));
    }
}
