//! The refill: a fair share of ready items from each of the next held
//! partitions with work, in round-robin order, into the prefetch buffer,
//! leaving out what is already known here.

use std::collections::{HashMap, HashSet, VecDeque};

use super::Dispatcher;
use crate::store::{MAX_BRANCHES, ReadyItem};

impl Dispatcher {
    /// How many items of each partition are in flight, buffered or cooling.
    pub(super) fn known_per_partition(&self) -> HashMap<String, usize> {
        let mut known: HashMap<String, usize> = HashMap::new();
        let partitions = self
            .in_flight
            .values()
            .map(|f| &f.partition_id)
            .chain(self.buffer.iter().map(|i| &i.fence.partition_id))
            .chain(self.cooling.values().map(|(p, _)| p));
        for p in partitions {
            *known.entry(p.clone()).or_default() += 1;
        }
        known
    }

    /// Fetches up to `want` ready items that are not known here yet: a
    /// fair share from each of the next partitions with work, in turn.
    pub(super) async fn refill(&mut self, want: usize) {
        let store = &self.shared.store;
        let cap = self.shared.config.max_in_flight_per_partition;
        let parts = match store
            .ready_partitions(&self.me, &self.cursor, MAX_BRANCHES)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "polling for items failed; will retry");
                return;
            }
        };
        let Some(last) = parts.last() else {
            self.more = false;
            return;
        };
        self.cursor = last.clone();
        let known = self.known_per_partition();
        let share = want.div_ceil(parts.len());
        // Each partition's first `share + known` ready items hold at least
        // `share` that are not known here: those in flight, buffered or
        // cooling are among its ready items and are filtered out below.
        let asks: Vec<(String, usize)> = parts
            .iter()
            .filter_map(|p| {
                let k = known.get(p).copied().unwrap_or(0);
                let room = cap.map_or(share, |c| c.saturating_sub(k).min(share));
                (room > 0).then(|| (p.clone(), room + k))
            })
            .collect();
        let items = match store.ready_items(&self.me, &asks).await {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(error = %e, "polling for items failed; will retry");
                return;
            }
        };
        let buffered: HashSet<String> = self.buffer.iter().map(|i| i.fence.id.clone()).collect();
        let mut by_partition: HashMap<String, VecDeque<ReadyItem>> = HashMap::new();
        for item in items {
            let id = &item.fence.id;
            if self.in_flight.contains_key(id)
                || buffered.contains(id)
                || self.cooling.contains_key(id)
            {
                continue;
            }
            by_partition
                .entry(item.fence.partition_id.clone())
                .or_default()
                .push_back(item);
        }
        // Interleave: one item of each partition, then the next round.
        let mut fetched = 0;
        let mut rounds: Vec<VecDeque<ReadyItem>> = asks
            .iter()
            .filter_map(|(p, _)| by_partition.remove(p))
            .collect();
        while !rounds.is_empty() {
            rounds.retain_mut(|q| match q.pop_front() {
                Some(item) => {
                    self.buffer.push_back(item);
                    fetched += 1;
                    true
                }
                None => false,
            });
        }
        self.more = fetched >= want || parts.len() == MAX_BRANCHES;
    }
}
