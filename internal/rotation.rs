//! The round-robin order in which a processor serves its partitions that
//! have ready work. Discovering which partitions have work costs a query,
//! so it is done when the rotation runs dry, after a wake-up, and at most
//! every poll interval otherwise (so a partition that gets new work joins
//! the rotation within one poll interval); in between, each refill serves
//! the next partitions in turn and keeps those that still have work.

use std::collections::{HashSet, VecDeque};

use tokio::time::Instant;

/// Partitions with ready work, in the order they are served.
#[derive(Debug, Default)]
pub struct Rotation {
    queue: VecDeque<String>,
    members: HashSet<String>,
    /// Where the next discovery starts (ids are visited in order, wrapping).
    pub cursor: String,
    /// When the next discovery is due; None = now.
    due: Option<Instant>,
}

impl Rotation {
    /// Whether a discovery should run before the next refill.
    pub fn needs_discovery(&self, now: Instant) -> bool {
        self.queue.is_empty() || self.due.is_none_or(|d| now >= d)
    }

    /// Asks for a discovery before the next refill (new work may be ready).
    pub fn rediscover(&mut self) {
        self.due = None;
    }

    /// Adds discovered partitions at the end, in order; the next discovery
    /// is due at `next`.
    pub fn discovered(&mut self, ids: Vec<String>, next: Instant) {
        if let Some(last) = ids.last() {
            self.cursor = last.clone();
        }
        for id in ids {
            if self.members.insert(id.clone()) {
                self.queue.push_back(id);
            }
        }
        self.due = Some(next);
    }

    /// Takes up to `n` partitions from the front, to serve now.
    pub fn take(&mut self, n: usize) -> Vec<String> {
        let n = n.min(self.queue.len());
        let taken: Vec<String> = self.queue.drain(..n).collect();
        for id in &taken {
            self.members.remove(id);
        }
        taken
    }

    /// Puts a served partition that still has work at the end.
    pub fn keep(&mut self, id: String) {
        if self.members.insert(id.clone()) {
            self.queue.push_back(id);
        }
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
            vec!["a".into(), "b".into(), "c".into()],
            now + std::time::Duration::from_secs(1),
        );
        assert!(!r.needs_discovery(now));
        assert_eq!(r.cursor, "c");
        assert_eq!(r.take(2), vec!["a", "b"]);
        r.keep("a".into());
        // b ran dry; a goes behind c.
        assert_eq!(r.take(5), vec!["c", "a"]);
        assert!(r.needs_discovery(now), "an empty rotation discovers");
        r.discovered(vec!["c".into(), "c".into()], now);
        assert_eq!(r.take(5), vec!["c"], "no duplicates");
    }
}
