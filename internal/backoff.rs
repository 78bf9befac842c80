//! Retry delays, one helper for every retry path: exponential with jitter,
//! capped. [`delay`] computes an item's stored backoff from its attempt
//! number; [`Backoff`] paces a loop that retries in place (connecting,
//! registering, LISTEN, transient statement conflicts).

use std::time::Duration;

/// The delay before attempt `attempt + 1`: `base * 2^(attempt-1)` capped at
/// `max`, then a random value between half of it and all of it, so retries
/// of many items spread out instead of arriving together.
pub(crate) fn delay(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(30));
    jitter(exp.min(max))
}

/// Between half of `d` and all of it.
fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// The delays of one retry loop: the first is about `base`, each next one
/// twice the last, up to `max`.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// A loop whose first retry waits about `base`.
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            attempt: 0,
        }
    }

    /// The delay before the next try.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        delay(self.base, self.max, self.attempt)
    }

    /// Waits [`Backoff::next_delay`].
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Starts over at `base` (after a success).
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let (b, m) = (Duration::from_secs(1), Duration::from_secs(300));
        for _ in 0..100 {
            let d1 = delay(b, m, 1);
            assert!(d1 >= Duration::from_millis(500) && d1 <= b);
            let d4 = delay(b, m, 4);
            assert!(d4 >= Duration::from_secs(4) && d4 <= Duration::from_secs(8));
            let d40 = delay(b, m, 40);
            assert!(d40 >= Duration::from_secs(150) && d40 <= m);
        }
    }

    #[test]
    fn a_loop_doubles_then_starts_over() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        let second = b.next_delay();
        assert!(second >= Duration::from_millis(100) && second <= Duration::from_millis(200));
        for _ in 0..10 {
            assert!(b.next_delay() <= Duration::from_millis(400));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
