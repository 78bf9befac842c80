//! The pause while the handler is unreachable: no attempts are counted,
//! and one probe delivery at growing intervals finds out when it is back.

use std::time::Duration;

use tokio::time::Instant;

/// The pause while the handler is unreachable: it starts at [`PAUSE_BASE`]
/// and doubles once per failed probe, up to [`PAUSE_MAX`]. Deliveries
/// that were already in flight when it began do not lengthen it.
#[derive(Debug, Default)]
pub(super) struct Pause {
    /// No dispatch before this instant, then one probe.
    pub(super) until: Option<Instant>,
    /// The current pause length.
    pub(super) delay: Duration,
    /// The item sent as the probe.
    pub(super) probe: Option<String>,
}

/// First pause after the handler is found unreachable.
const PAUSE_BASE: Duration = Duration::from_millis(250);
/// Longest pause between probes.
const PAUSE_MAX: Duration = Duration::from_secs(10);

impl Pause {
    /// A delivery found the handler unreachable; true when this starts a pause.
    pub(super) fn unreachable(&mut self, item: &str, now: Instant) -> bool {
        let start = self.until.is_none();
        if start {
            self.delay = PAUSE_BASE;
        } else if self.probe.as_deref() == Some(item) {
            self.delay = (self.delay * 2).min(PAUSE_MAX);
        } else {
            return false;
        }
        self.probe = None;
        self.until = Some(now + self.delay);
        start
    }

    /// A delivery reached the handler; true when this ends a pause.
    pub(super) fn reachable(&mut self) -> bool {
        self.probe = None;
        self.until.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_doubles_per_failed_probe_only() {
        let mut p = Pause::default();
        let t = Instant::now();
        assert!(p.unreachable("a", t));
        assert_eq!(p.delay, PAUSE_BASE);
        // 63 more deliveries that were in flight: no change.
        for i in 0..63 {
            assert!(!p.unreachable(&format!("x{i}"), t));
        }
        assert_eq!(p.delay, PAUSE_BASE);
        p.probe = Some("probe".into());
        p.unreachable("probe", t);
        assert_eq!(p.delay, PAUSE_BASE * 2);
        for _ in 0..10 {
            p.probe = Some("probe".into());
            p.unreachable("probe", t);
        }
        assert_eq!(p.delay, PAUSE_MAX);
        assert!(p.reachable());
        assert!(p.unreachable("b", t));
        assert_eq!(p.delay, PAUSE_BASE);
    }
}
