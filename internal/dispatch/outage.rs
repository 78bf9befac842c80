//! A handler outage: while the handler is unreachable dispatch holds off
//! (no attempts are counted), and one probe delivery at growing intervals
//! finds out when it is back. Not to be confused with an operator's pause
//! of a partition, which is stored in the database.

use std::time::Duration;

use tokio::time::Instant;

use crate::ids::ItemId;

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
    pub(super) probe: Option<ItemId>,
}

/// First hold-off after the handler is found unreachable.
const HOLD_OFF_BASE: Duration = Duration::from_millis(250);
/// Longest hold-off between probes.
const HOLD_OFF_MAX: Duration = Duration::from_secs(10);

impl Outage {
    /// A delivery found the handler unreachable; true when this starts an outage.
    pub(super) fn unreachable(&mut self, item: &str, now: Instant) -> bool {
        let start = self.until.is_none();
        if start {
            self.delay = HOLD_OFF_BASE;
        } else if self.probe.as_deref() == Some(item) {
            self.delay = (self.delay * 2).min(HOLD_OFF_MAX);
        } else {
            return false;
        }
        self.probe = None;
        self.until = Some(now + self.delay);
        start
    }

    /// A delivery reached the handler; true when this ends an outage.
    pub(super) fn reachable(&mut self) -> bool {
        self.probe = None;
        self.until.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_off_doubles_per_failed_probe_only() {
        let mut p = Outage::default();
        let t = Instant::now();
        assert!(p.unreachable("a", t));
        assert_eq!(p.delay, HOLD_OFF_BASE);
        // 63 more deliveries that were in flight: no change.
        for i in 0..63 {
            assert!(!p.unreachable(&format!("x{i}"), t));
        }
        assert_eq!(p.delay, HOLD_OFF_BASE);
        p.probe = Some("probe".into());
        p.unreachable("probe", t);
        assert_eq!(p.delay, HOLD_OFF_BASE * 2);
        for _ in 0..10 {
            p.probe = Some("probe".into());
            p.unreachable("probe", t);
        }
        assert_eq!(p.delay, HOLD_OFF_MAX);
        assert!(p.reachable());
        assert!(p.unreachable("b", t));
        assert_eq!(p.delay, HOLD_OFF_BASE);
    }
}
