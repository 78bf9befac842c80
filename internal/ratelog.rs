//! A condition logged at a bounded rate: its first occurrence at once,
//! then at most once per [`REPEAT`] with the number of occurrences since
//! the last line, and once more when it is over. A fault that lasts costs
//! a few lines, not one per statement or per item.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a lasting condition is logged again.
pub(crate) const REPEAT: Duration = Duration::from_secs(15);

/// One condition's log state.
#[derive(Debug, Default)]
pub(crate) struct Every {
    /// When it was last logged (None: it is not going on), and the
    /// occurrences since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Every {
    /// A condition not going on (for a `static`).
    pub(crate) const fn new() -> Self {
        Self {
            state: Mutex::new((None, 0)),
        }
    }

    /// Counts an occurrence; Some(occurrences since the last line, this
    /// one included) when it is due to be logged.
    pub(crate) fn due(&self) -> Option<u64> {
        self.due_at(Instant::now())
    }

    fn due_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().expect("ratelog lock");
        s.1 += 1;
        if s.0.is_some_and(|at| now < at + REPEAT) {
            return None;
        }
        s.0 = Some(now);
        Some(std::mem::take(&mut s.1))
    }

    /// Ends the condition; true when it was going on (the caller logs
    /// that it is over).
    pub(crate) fn over(&self) -> bool {
        let mut s = self.state.lock().expect("ratelog lock");
        std::mem::take(&mut *s).0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_at_once_then_at_a_bounded_rate_with_a_count() {
        let e = Every::default();
        let t = Instant::now();
        assert_eq!(e.due_at(t), Some(1));
        for _ in 0..99 {
            assert_eq!(e.due_at(t + REPEAT / 2), None);
        }
        assert_eq!(e.due_at(t + REPEAT), Some(100));
        assert!(e.over());
        assert!(!e.over(), "over once");
        assert_eq!(
            e.due_at(t + REPEAT),
            Some(1),
            "a new condition logs at once"
        );
    }
}
