//! The round-robin order in which a processor serves its partitions that
//! have ready work.
//!
//! Partitions join it from what the processor learns anyway: a gate check
//! that found work at the gate (or advanced it), a slice of the acquire
//! cycle's probes that found work ready, and a look at the items written
//! since the last look (new work from producers, by write order). That
//! look is due every poll interval, or at once after a wake-up; it reads
//! only the rows written since the last one, so finding work costs nothing
//! per held partition. In between, each refill serves the next partitions
//! in turn and keeps those that still have work.

use std::collections::{HashSet, VecDeque};

use tokio::time::Instant;

use crate::ids::PartitionId;

/// Partitions with ready work, in the order they are served.
#[derive(Debug, Default)]
pub struct Rotation {
    queue: VecDeque<PartitionId>,
    members: HashSet<PartitionId>,
    /// The write position up to which new items have been looked at; None
    /// until the first look.
    pub mark: Option<i64>,
    /// When the next look at new items is due; None = now.
    due: Option<Instant>,
}

impl Rotation {
    /// Whether a look at new items should run before the next refill.
    pub fn needs_discovery(&self, now: Instant) -> bool {
        self.due.is_none_or(|d| now >= d)
    }

    /// Asks for a look at new items before the next refill.
    pub fn rediscover(&mut self) {
        self.due = None;
    }

    /// Records a look at new items: their partitions (those held) join the
    /// rotation, the mark moves to `mark`, and the next look is due at `next`.
    pub fn discovered(
        &mut self,
        ids: impl IntoIterator<Item = PartitionId>,
        mark: i64,
        next: Instant,
    ) {
        for id in ids {
            self.offer(id);
        }
        self.mark = Some(mark);
        self.due = Some(next);
    }

    /// Takes up to `n` partitions from the front, to serve now.
    pub fn take(&mut self, n: usize) -> Vec<PartitionId> {
        let n = n.min(self.queue.len());
        let taken: Vec<PartitionId> = self.queue.drain(..n).collect();
        for id in &taken {
            self.members.remove(id);
        }
        taken
    }

    /// Puts a partition that has (or may have) work at the end, unless it
    /// is already waiting.
    pub fn offer(&mut self, id: PartitionId) {
        if self.members.insert(id.clone()) {
            self.queue.push_back(id);
        }
    }

    /// Whether `id` waits in the rotation.
    pub fn contains(&self, id: &str) -> bool {
        self.members.contains(id)
    }

    /// Whether no partition waits in the rotation.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops partitions that are no longer held.
    pub fn retain(&mut self, held: impl Fn(&str) -> bool) {
        self.queue.retain(|id| held(id));
        self.members.retain(|id| held(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_in_turn() {
        let now = Instant::now();
        let mut r = Rotation::default();
        assert!(r.needs_discovery(now));
        r.discovered(
            ["a", "b", "c", "a"].map(PartitionId::from),
            7,
            now + std::time::Duration::from_secs(1),
        );
        assert!(!r.needs_discovery(now));
        assert_eq!(r.mark, Some(7));
        assert_eq!(r.take(2), vec!["a", "b"]);
        r.offer("a".into());
        // b ran dry; a goes behind c.
        assert_eq!(r.take(5), vec!["c", "a"]);
        assert!(r.is_empty());
        r.offer("c".into());
        r.offer("c".into());
        assert_eq!(r.take(5), vec!["c"], "no duplicates");
        r.rediscover();
        assert!(r.needs_discovery(now));
    }
}
