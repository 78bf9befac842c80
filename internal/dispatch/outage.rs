//! A handler outage: while the handler is unreachable dispatch holds off
//! (no attempts are counted), and one probe delivery at growing intervals
//! finds out when it is back. Not to be confused with an operator's pause
//! of a partition, which is stored in the database.
//!
//! Probes go to items not yet probed in this outage, those with the fewest
//! failed attempts first; an item probed a second time has its failure
//! counted as an attempt, so an item that fails alone (the last one left,
//! a poison input) uses up its attempts instead of being probed for ever.
//!
//! An open circuit breaker holds dispatch off too, from the first poll
//! that sees it open ([`Outage::begin`]), and while it is open no answer
//! ends the hold-off: only the probe whose answer closes it does.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::ids::ItemKey;
use crate::store::ReadyItem;

/// The hold-off while the handler is unreachable: it starts at
/// [`HOLD_OFF_BASE`] and doubles once per failed probe, up to
/// [`HOLD_OFF_MAX`]. Deliveries that were already in flight when it began
/// do not lengthen it.
#[derive(Debug, Default)]
pub(super) struct Outage {
    /// No dispatch before this instant, then one probe.
    pub(super) until: Option<Instant>,
    /// The current hold-off.
    pub(super) delay: Duration,
    /// The item sent as the probe.
    pub(super) probe: Option<ItemKey>,
    /// When the outage began.
    pub(super) since: Option<Instant>,
    /// Why the last delivery did not reach the handler.
    pub(super) why: String,
    /// When the outage was last reported in the log.
    warned: Option<Instant>,
    /// Items probed in this outage.
    probed: HashSet<ItemKey>,
}

/// How often the log repeats that dispatch holds off, while it lasts.
pub(super) const WARN_EVERY: Duration = Duration::from_secs(15);

/// First hold-off after the handler is found unreachable.
const HOLD_OFF_BASE: Duration = Duration::from_millis(250);
/// Longest hold-off between probes.
const HOLD_OFF_MAX: Duration = Duration::from_secs(10);

impl Outage {
    /// A delivery found the handler unreachable (`why`); true when this
    /// starts an outage.
    pub(super) fn unreachable(&mut self, item: &ItemKey, why: &str, now: Instant) -> bool {
        let start = self.until.is_none();
        self.why = why.to_owned();
        if start {
            self.delay = HOLD_OFF_BASE;
            self.since = Some(now);
        } else if self.probe.as_ref() == Some(item) {
            self.delay = (self.delay * 2).min(HOLD_OFF_MAX);
        } else {
            return false;
        }
        self.probe = None;
        self.until = Some(now + self.delay);
        start
    }

    /// The circuit breaker is open: holds off from `now`, unless an
    /// outage is on already. The reason and the log line come with the
    /// delivery that opened it, which ends as unreachable.
    pub(super) fn begin(&mut self, now: Instant) {
        if self.until.is_none() {
            self.delay = HOLD_OFF_BASE;
            self.since = Some(now);
            self.probe = None;
            self.until = Some(now + self.delay);
        }
    }

    /// A delivery reached the handler; true when this ends an outage.
    pub(super) fn reachable(&mut self) -> bool {
        self.probe = None;
        self.since = None;
        self.warned = None;
        self.probed.clear();
        self.until.take().is_some()
    }

    /// Whether the outage is due to be reported again (first at once,
    /// then every [`WARN_EVERY`]); marks it reported.
    pub(super) fn warn_due(&mut self, now: Instant) -> bool {
        let due = self.warned.is_none_or(|at| now >= at + WARN_EVERY);
        if due {
            self.warned = Some(now);
        }
        due
    }

    /// Moves the item the next probe should go to to the front of
    /// `buffer`: one not probed yet in this outage, with the fewest
    /// failed attempts.
    pub(super) fn prefer(&self, buffer: &mut VecDeque<ReadyItem>) {
        let best = buffer
            .iter()
            .enumerate()
            .min_by_key(|(_, i)| (self.probed.contains(&i.fence.key()), i.fence.attempts))
            .map(|(at, _)| at);
        if let Some(item) = best.and_then(|at| buffer.remove(at)) {
            buffer.push_front(item);
        }
    }

    /// Records `item` as the probe; true when it was probed before in
    /// this outage (its failure then counts an attempt).
    pub(super) fn probing(&mut self, item: &ItemKey) -> bool {
        self.probe = Some(item.clone());
        !self.probed.insert(item.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> ItemKey {
        ItemKey {
            partition: "p".into(),
            id: id.into(),
        }
    }

    #[test]
    fn hold_off_doubles_per_failed_probe_only() {
        let mut p = Outage::default();
        let t = Instant::now();
        assert!(p.unreachable(&key("a"), "refused", t));
        assert_eq!(p.delay, HOLD_OFF_BASE);
        // 63 more deliveries that were in flight: no change.
        for i in 0..63 {
            assert!(!p.unreachable(&key(&format!("x{i}")), "refused", t));
        }
        assert_eq!(p.delay, HOLD_OFF_BASE);
        p.probe = Some(key("probe"));
        p.unreachable(&key("probe"), "refused", t);
        assert_eq!(p.delay, HOLD_OFF_BASE * 2);
        for _ in 0..10 {
            p.probe = Some(key("probe"));
            p.unreachable(&key("probe"), "refused", t);
        }
        assert_eq!(p.delay, HOLD_OFF_MAX);
        assert!(p.reachable());
        assert!(p.unreachable(&key("b"), "refused", t));
        assert_eq!(p.delay, HOLD_OFF_BASE);
    }

    #[test]
    fn an_open_breaker_begins_an_outage_once() {
        let mut p = Outage::default();
        let t = Instant::now();
        p.begin(t);
        assert_eq!(p.until, Some(t + HOLD_OFF_BASE));
        assert_eq!(p.since, Some(t));
        // The opening delivery ends unreachable: no longer hold-off.
        assert!(!p.unreachable(&key("a"), "circuit breaker open", t));
        assert_eq!(p.delay, HOLD_OFF_BASE);
        // A failed probe doubles it, and a later poll leaves it so.
        p.probe = Some(key("probe"));
        p.unreachable(&key("probe"), "circuit breaker open", t);
        p.begin(t + HOLD_OFF_BASE);
        assert_eq!(p.delay, HOLD_OFF_BASE * 2);
        assert_eq!(p.since, Some(t));
    }

    #[test]
    fn the_log_repeats_at_a_bounded_interval() {
        let mut p = Outage::default();
        let t = Instant::now();
        p.unreachable(&key("a"), "refused", t);
        assert!(p.warn_due(t));
        assert!(!p.warn_due(t + WARN_EVERY / 2));
        assert!(p.warn_due(t + WARN_EVERY));
        assert!(!p.warn_due(t + WARN_EVERY + Duration::from_secs(1)));
    }

    #[test]
    fn probes_go_to_fresh_items_and_a_second_probe_counts() {
        let mut p = Outage::default();
        let item = |id: &str, attempts| ReadyItem {
            fence: crate::store::Fence {
                id: id.into(),
                partition_id: "p".into(),
                gate: 0,
                version: 1,
                attempts,
                steps: 0,
            },
            data: Vec::new(),
            seq: 0,
            scheduled: false,
            traceparent: None,
            waited: None,
            read: std::time::Instant::now(),
        };
        let mut buffer: VecDeque<ReadyItem> = [item("a", 2), item("b", 0), item("c", 1)].into();
        p.prefer(&mut buffer);
        assert_eq!(buffer[0].fence.id.as_str(), "b", "fewest attempts first");
        assert!(!p.probing(&buffer[0].fence.key()));
        p.prefer(&mut buffer);
        assert_eq!(buffer[0].fence.id.as_str(), "c", "not probed yet first");
        // The only item left is probed again: that probe counts.
        let mut alone: VecDeque<ReadyItem> = [item("b", 0)].into();
        p.prefer(&mut alone);
        assert!(p.probing(&alone[0].fence.key()));
        p.reachable();
        assert!(
            !p.probing(&alone[0].fence.key()),
            "a new outage starts afresh"
        );
    }
}
