//! Held partitions whose work waits for a time (scheduled items, retries
//! backing off): the dispatch loop sleeps until the first comes due, then
//! serves the partition, instead of reading the waiting items again and
//! again. A gate check that finds a partition idle says when (by the
//! database clock), and the loop sets it here.

use std::collections::{BTreeSet, HashMap};

use tokio::time::Instant;

use crate::ids::PartitionId;

/// When each waiting partition comes due, one time per partition (the
/// last check's).
#[derive(Debug, Default)]
pub(super) struct Wakeups {
    by_time: BTreeSet<(Instant, PartitionId)>,
    of: HashMap<PartitionId, Instant>,
}

impl Wakeups {
    /// Wakes `partition` at `at`, in place of any time set before: the
    /// latest check knows best.
    pub(super) fn set(&mut self, partition: PartitionId, at: Instant) {
        if let Some(old) = self.of.insert(partition.clone(), at) {
            self.by_time.remove(&(old, partition.clone()));
        }
        self.by_time.insert((at, partition));
    }

    /// The first time set, if any.
    pub(super) fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Takes every partition due by `now`, first due first.
    pub(super) fn due(&mut self, now: Instant) -> Vec<PartitionId> {
        let mut out = Vec::new();
        while let Some((at, _)) = self.by_time.first()
            && *at <= now
        {
            let (_, p) = self.by_time.pop_first().expect("just seen");
            self.of.remove(&p);
            out.push(p);
        }
        out
    }

    /// Forgets every time (the session's leases are gone).
    pub(super) fn clear(&mut self) {
        self.by_time.clear();
        self.of.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn partitions_come_due_in_time_order_once() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut w = Wakeups::default();
        assert_eq!(w.next(), None);
        w.set("b".into(), at(20));
        w.set("a".into(), at(10));
        w.set("c".into(), at(30));
        // A later check moves a partition's time, in either direction.
        w.set("c".into(), at(5));
        w.set("a".into(), at(40));
        assert_eq!(w.next(), Some(at(5)));
        assert_eq!(w.due(at(4)), Vec::<PartitionId>::new());
        assert_eq!(w.due(at(20)), ["c", "b"]);
        assert_eq!(w.next(), Some(at(40)));
        assert_eq!(w.due(at(100)), ["a"]);
        assert_eq!(w.next(), None);
        w.set("d".into(), at(1));
        w.clear();
        assert_eq!(w.next(), None);
    }
}
