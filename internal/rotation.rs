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
//!
//! Priority is strict among partitions that share turns: a tenant's
//! waiting partitions are served highest priority first (in turn order
//! among equals), and a partition of no tenant waits ahead of every
//! partition of no tenant with a lower priority. Tenants still take turns
//! by weight, whatever their partitions' priorities.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::time::Instant;

use crate::ids::{PartitionId, Tenant};

/// What partitions take turns as: their tenant, or, without one, each
/// partition on its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    /// The partitions of one tenant share its turns.
    Tenant(Tenant),
    /// A partition without a tenant.
    Alone(PartitionId),
}

/// Partitions with ready work, in the order they are served: groups take
/// turns, and within a group its partitions do.
#[derive(Debug, Default)]
pub(crate) struct Rotation {
    /// Groups with waiting partitions, in turn order; the front one's
    /// turns used so far.
    turns: VecDeque<Group>,
    used: u32,
    /// Each group's waiting partitions, in turn order.
    queues: HashMap<Group, VecDeque<PartitionId>>,
    /// Waiting partition → its group.
    members: HashMap<PartitionId, Group>,
    /// Partitions of a tenant (the rest are alone).
    tenants: HashMap<PartitionId, Tenant>,
    /// Partitions whose priority is not 0.
    priorities: HashMap<PartitionId, i32>,
    /// How many groups of partitions alone wait in `turns`, by priority.
    alone: BTreeMap<i32, usize>,
    /// The write position up to which new items have been looked at; None
    /// until the first look.
    pub mark: Option<i64>,
    /// When the next look at new items is due; None = now.
    due: Option<Instant>,
}

impl Rotation {
    /// Whether a look at new items should run before the next refill.
    pub(crate) fn needs_discovery(&self, now: Instant) -> bool {
        self.due.is_none_or(|d| now >= d)
    }

    /// Asks for a look at new items before the next refill.
    pub(crate) fn rediscover(&mut self) {
        self.due = None;
    }

    /// Records a look at new items: their partitions (those held) join the
    /// rotation, the mark moves to `mark`, and the next look is due at `next`.
    pub(crate) fn discovered(
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

    /// Sets (or, with None, clears) the tenant a partition takes turns
    /// with, and its priority; applies the next time it joins.
    pub(crate) fn set_attrs(&mut self, id: &PartitionId, tenant: Option<&Tenant>, priority: i32) {
        match tenant {
            Some(t) => self.tenants.insert(id.clone(), t.clone()),
            None => self.tenants.remove(id),
        };
        match priority {
            0 => self.priorities.remove(id),
            p => self.priorities.insert(id.clone(), p),
        };
    }

    fn priority(&self, id: &str) -> i32 {
        self.priorities.get(id).copied().unwrap_or(0)
    }

    /// Counts a group of a partition alone into or out of `turns`.
    fn count_alone(&mut self, group: &Group, by: isize) {
        if let Group::Alone(id) = group {
            let p = self.priority(id);
            let n = self.alone.entry(p).or_default();
            *n = n.saturating_add_signed(by);
            if *n == 0 {
                self.alone.remove(&p);
            }
        }
    }

    /// The tenant a partition takes turns with.
    pub(crate) fn tenant(&self, id: &str) -> Option<&Tenant> {
        self.tenants.get(id)
    }

    /// Takes up to `n` partitions to serve now, groups in turn: a group
    /// gets `turns(group)` partitions in a row (its weight), and groups
    /// for which `skip` holds are passed over (they keep their place).
    pub(crate) fn take(
        &mut self,
        n: usize,
        turns: impl Fn(&Group) -> u32,
        skip: impl Fn(&Group) -> bool,
    ) -> Vec<PartitionId> {
        let mut taken = Vec::new();
        let mut passed = Vec::new();
        while taken.len() < n {
            let Some(group) = self.turns.pop_front() else {
                break;
            };
            if skip(&group) {
                passed.push(group);
                self.used = 0;
                continue;
            }
            let queue = self
                .queues
                .get_mut(&group)
                .expect("a group in turn has a queue");
            let id = queue.pop_front().expect("a group in turn has partitions");
            self.members.remove(&id);
            taken.push(id);
            self.used += 1;
            if queue.is_empty() {
                self.queues.remove(&group);
                self.used = 0;
                self.count_alone(&group, -1);
            } else if self.used < turns(&group).max(1) {
                self.turns.push_front(group);
            } else {
                self.turns.push_back(group);
                self.used = 0;
            }
        }
        // Groups passed over go first next time, in their order.
        for group in passed.into_iter().rev() {
            self.turns.push_front(group);
        }
        taken
    }

    /// Puts a partition that has (or may have) work at the end of its
    /// group, unless it is already waiting.
    pub(crate) fn offer(&mut self, id: PartitionId) {
        if self.members.contains_key(&id) {
            return;
        }
        let group = match self.tenants.get(&id) {
            Some(t) => Group::Tenant(t.clone()),
            None => Group::Alone(id.clone()),
        };
        let p = self.priority(&id);
        if !self.queues.contains_key(&group) {
            self.join_turns(group.clone(), p);
        }
        let priorities = &self.priorities;
        let queue = self.queues.entry(group.clone()).or_default();
        // Highest priority first, in turn order among equals.
        let at = queue.partition_point(|q| priorities.get(q).copied().unwrap_or(0) >= p);
        queue.insert(at, id.clone());
        self.members.insert(id, group);
    }

    /// Puts a group with a partition waiting into the turns: at the end,
    /// but a partition alone of priority `p` ahead of the first partition
    /// alone with a lower one.
    fn join_turns(&mut self, group: Group, p: i32) {
        let lower_waits = matches!(group, Group::Alone(_))
            && self.alone.keys().next().is_some_and(|&lowest| lowest < p);
        let at = if lower_waits {
            let priorities = &self.priorities;
            self.turns.iter().position(
                |g| matches!(g, Group::Alone(q) if priorities.get(q).copied().unwrap_or(0) < p),
            )
        } else {
            None
        };
        self.count_alone(&group, 1);
        match at {
            Some(i) => self.turns.insert(i, group),
            None => self.turns.push_back(group),
        }
    }

    /// Whether `id` waits in the rotation.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.members.contains_key(id)
    }

    /// Whether no partition waits in the rotation.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Drops waiting partitions that are no longer to be served (their
    /// tenants are kept: see `set_attrs`).
    pub(crate) fn retain(&mut self, held: impl Fn(&str) -> bool) {
        self.members.retain(|id, _| held(id));
        for queue in self.queues.values_mut() {
            queue.retain(|id| held(id));
        }
        self.queues.retain(|_, q| !q.is_empty());
        let queues = &self.queues;
        self.turns.retain(|g| queues.contains_key(g));
        self.alone.clear();
        for g in self.turns.clone() {
            self.count_alone(&g, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(_: &Group) -> u32 {
        1
    }

    fn none(_: &Group) -> bool {
        false
    }

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
        assert_eq!(r.take(2, one, none), vec!["a", "b"]);
        r.offer("a".into());
        // b ran dry; a goes behind c.
        assert_eq!(r.take(5, one, none), vec!["c", "a"]);
        assert!(r.is_empty());
        r.offer("c".into());
        r.offer("c".into());
        assert_eq!(r.take(5, one, none), vec!["c"], "no duplicates");
        r.rediscover();
        assert!(r.needs_discovery(now));
    }

    #[test]
    fn tenants_take_turns_by_weight_then_their_partitions() {
        let now = Instant::now();
        let mut r = Rotation::default();
        for i in 0..4 {
            let id = PartitionId::from(format!("a{i}").as_str());
            r.set_attrs(&id, Some(&"A".into()), 0);
        }
        r.set_attrs(&"b0".into(), Some(&"B".into()), 0);
        let ids = ["a0", "a1", "a2", "a3", "b0", "x"].map(PartitionId::from);
        r.discovered(ids, 1, now);
        // A tenant with four partitions gets no more turns than one with one,
        // or than a partition without a tenant.
        assert_eq!(
            r.take(6, one, none),
            vec!["a0", "b0", "x", "a1", "a2", "a3"]
        );
        // Weight 2 for A: two turns in a row.
        for id in ["a0", "a1", "a2", "b0"] {
            r.offer(id.into());
        }
        let weight = |g: &Group| {
            if *g == Group::Tenant("A".into()) {
                2
            } else {
                1
            }
        };
        assert_eq!(r.take(4, weight, none), vec!["a0", "a1", "b0", "a2"]);
        // A blocked tenant is passed over and keeps its place.
        for id in ["a0", "b0", "x"] {
            r.offer(id.into());
        }
        let blocked = |g: &Group| *g == Group::Tenant("A".into());
        assert_eq!(r.take(5, one, blocked), vec!["b0", "x"]);
        assert_eq!(r.take(5, one, none), vec!["a0"]);
        r.offer("a1".into());
        r.retain(|id| id != "a1");
        assert!(r.is_empty());
    }

    #[test]
    fn higher_priorities_go_first_among_those_sharing_turns() {
        let now = Instant::now();
        let mut r = Rotation::default();
        let ids = |xs: &[&str]| xs.iter().map(|x| PartitionId::from(*x)).collect::<Vec<_>>();
        // Partitions of no tenant: a later one of priority 10 goes first,
        // one of priority -5 last, and a re-offered 10 first again.
        r.set_attrs(&"z".into(), None, 10);
        r.set_attrs(&"n".into(), None, -5);
        r.discovered(ids(&["n", "x0", "x1", "x2", "z"]), 1, now);
        assert_eq!(r.take(1, one, none), vec!["z"]);
        r.offer("z".into());
        assert_eq!(r.take(2, one, none), vec!["z", "x0"]);
        assert_eq!(r.take(5, one, none), vec!["x1", "x2", "n"]);
        // Within a tenant: highest first, in turn order among equals;
        // tenants still take turns.
        for (id, p) in [("a0", 0), ("a1", 5), ("a2", 5)] {
            r.set_attrs(&id.into(), Some(&"A".into()), p);
        }
        r.set_attrs(&"b0".into(), Some(&"B".into()), 0);
        r.discovered(ids(&["a0", "a1", "b0", "a2"]), 2, now);
        assert_eq!(r.take(4, one, none), vec!["a1", "b0", "a2", "a0"]);
        assert!(r.is_empty() && r.alone.is_empty());
    }
}
