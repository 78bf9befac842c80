//! Where each partition's next refill may start reading.
//!
//! A full read of a partition's ready items returns, first, the items this
//! processor already knows (in flight, buffered), and they are dropped on
//! arrival: with a round of calls in flight that is most of every read. A
//! refill that returned all it asked for leaves a floor, the last item it
//! read, and the next read of that partition starts after it.
//!
//! Items before a floor can become ready again: a retry, another step at
//! the same gate, a result that was stale or not written, a backoff or a
//! cool-down ending, an operator's retry, a write that committed late. So a
//! floor is dropped when a delivery of the partition ends in anything but
//! done (and, for one that waits, a full read is due when its wait ends),
//! and it lasts one `--poll-interval` at most: what no one here saw is read
//! within that. A floored read that comes up short sends the partition to
//! its gate check like any that ran dry: the check reads the partition
//! whole and puts it back in the rotation, without a floor, when anything
//! at its gate is ready.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::ids::PartitionId;

/// The floors of the partitions held here.
#[derive(Debug, Default)]
pub(super) struct Floors {
    floors: HashMap<PartitionId, Floor>,
    /// When an item of the partition, known to wait for now, is ready
    /// again: no floor of it lasts past that.
    due: HashMap<PartitionId, Instant>,
    /// Dropped while a refill was running: that refill may have read
    /// before the change, so it sets no floor for them.
    dropped: HashSet<PartitionId>,
}

#[derive(Clone, Copy, Debug)]
struct Floor {
    /// The last item read, in write order.
    seq: i64,
    /// A full read is due from then on.
    until: Instant,
}

impl Floors {
    /// Where `partition`'s next read starts, if it may skip its first items.
    pub(super) fn after(&self, partition: &str, now: Instant) -> Option<i64> {
        self.floors
            .get(partition)
            .filter(|f| now < f.until)
            .map(|f| f.seq)
    }

    /// The next read of `partition` is a full one.
    pub(super) fn drop(&mut self, partition: &PartitionId, refilling: bool) {
        self.floors.remove(partition);
        if refilling {
            self.dropped.insert(partition.clone());
        }
    }

    /// An item of `partition` is ready again after `wait`: the next read
    /// is a full one, and so is the first one after the wait.
    pub(super) fn again(
        &mut self,
        partition: &PartitionId,
        wait: Duration,
        now: Instant,
        refilling: bool,
    ) {
        self.drop(partition, refilling);
        if !wait.is_zero() {
            let at = now + wait;
            self.due
                .entry(partition.clone())
                .and_modify(|d| *d = (*d).min(at))
                .or_insert(at);
        }
    }

    /// A refill that started at `started` returned all it asked of
    /// `partition` (read after `after`, up to `last`): its next read starts
    /// after `last`, until a full read is due.
    pub(super) fn read(
        &mut self,
        partition: &PartitionId,
        after: Option<i64>,
        last: i64,
        started: Instant,
        fresh: Duration,
    ) {
        if self.dropped.contains(partition) {
            self.floors.remove(partition);
            return;
        }
        let until = match after {
            // A floored read keeps its floor's term.
            Some(_) => match self.floors.get(partition) {
                Some(f) => f.until,
                None => return,
            },
            None => {
                // A full read that started after an item's wait ended has
                // read it (or it is gone): that wait no longer bounds the floor.
                if self.due.get(partition).is_some_and(|d| *d <= started) {
                    self.due.remove(partition);
                }
                started + fresh
            }
        };
        let until = self.due.get(partition).map_or(until, |d| until.min(*d));
        let seq = after.map_or(last, |a| a.max(last));
        self.floors.insert(partition.clone(), Floor { seq, until });
    }

    /// The partitions dropped while the refill that just ended ran are
    /// floored again by later refills only.
    pub(super) fn refill_ended(&mut self) {
        self.dropped.clear();
    }

    /// Forgets `partition` (lost, changed by someone else, or gone dry).
    pub(super) fn forget(&mut self, partition: &str) {
        self.floors.remove(partition);
        self.due.remove(partition);
    }

    /// Forgets every partition (the session was replaced).
    pub(super) fn clear(&mut self) {
        *self = Floors::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRESH: Duration = Duration::from_secs(1);

    fn p() -> PartitionId {
        "p".into()
    }

    #[test]
    fn a_full_read_floors_the_next_until_the_poll_interval() {
        let mut f = Floors::default();
        let t = Instant::now();
        assert_eq!(f.after("p", t), None);
        f.read(&p(), None, 40, t, FRESH);
        assert_eq!(f.after("p", t), Some(40));
        // A floored read moves the floor, not its term.
        f.read(&p(), Some(40), 90, t + FRESH / 2, FRESH);
        assert_eq!(f.after("p", t + FRESH / 2), Some(90));
        assert_eq!(f.after("p", t + FRESH), None, "a full read is due");
    }

    #[test]
    fn an_item_ready_again_drops_the_floor_and_bounds_the_next() {
        let mut f = Floors::default();
        let t = Instant::now();
        f.read(&p(), None, 40, t, FRESH);
        f.again(&p(), Duration::from_millis(200), t, false);
        assert_eq!(f.after("p", t), None);
        // A full read before the item's wait ends cannot have read it.
        f.read(&p(), None, 60, t + Duration::from_millis(100), FRESH);
        assert_eq!(f.after("p", t + Duration::from_millis(150)), Some(60));
        assert_eq!(f.after("p", t + Duration::from_millis(200)), None);
        // One after it has: the floor lasts its whole term again.
        f.read(&p(), None, 70, t + Duration::from_millis(250), FRESH);
        assert_eq!(f.after("p", t + Duration::from_millis(900)), Some(70));
    }

    #[test]
    fn a_dropped_floor_keeps_the_wait_that_bounds_the_next() {
        let mut f = Floors::default();
        let t = Instant::now();
        f.again(&p(), Duration::from_millis(300), t, false);
        f.read(&p(), None, 50, t, FRESH);
        // The floor goes, the wait stays.
        f.drop(&p(), false);
        f.read(&p(), None, 60, t + Duration::from_millis(10), FRESH);
        assert_eq!(f.after("p", t + Duration::from_millis(200)), Some(60));
        assert_eq!(f.after("p", t + Duration::from_millis(300)), None);
    }

    #[test]
    fn a_read_that_ran_across_a_drop_sets_no_floor() {
        let mut f = Floors::default();
        let t = Instant::now();
        f.read(&p(), None, 40, t, FRESH);
        f.again(&p(), Duration::ZERO, t, true);
        f.read(&p(), Some(40), 90, t, FRESH);
        assert_eq!(f.after("p", t), None);
        f.refill_ended();
        f.read(&p(), None, 90, t, FRESH);
        assert_eq!(f.after("p", t), Some(90));
    }

    #[test]
    fn a_floored_read_after_a_drop_sets_none() {
        let mut f = Floors::default();
        let t = Instant::now();
        f.read(&p(), Some(40), 90, t, FRESH);
        assert_eq!(f.after("p", t), None, "no floor to keep the term of");
        f.read(&p(), None, 90, t, FRESH);
        f.forget("p");
        assert_eq!(f.after("p", t), None);
    }
}
