//! The local token bucket that paces sends at a [`crate::rate::Rate`].

use tokio::time::{Duration, Instant};

/// A token bucket on this processor's clock: `rate` tokens a second, at
/// most `burst` saved up.
#[derive(Clone, Debug)]
pub(super) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A bucket that starts with one burst's worth.
    pub(super) fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Changes the rate, keeping what is saved up (within the new burst).
    pub(super) fn set(&mut self, rate: f64, burst: f64, now: Instant) {
        self.refill(now);
        self.rate = rate;
        self.burst = burst;
        self.tokens = self.tokens.min(burst);
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now;
    }

    /// Takes `n` tokens, or says when they will be there.
    pub(super) fn take(&mut self, n: f64, now: Instant) -> Result<(), Instant> {
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            return Ok(());
        }
        let short = n - self.tokens;
        Err(now + Duration::from_secs_f64(short / self.rate.max(1e-9)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_paces_at_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100.0, 10.0, t0);
        for _ in 0..10 {
            assert!(b.take(1.0, t0).is_ok());
        }
        let next = b.take(1.0, t0).unwrap_err();
        assert_eq!(next - t0, Duration::from_millis(10));
        // One second later: 100 more, but at most a burst at once.
        let t1 = t0 + Duration::from_secs(1);
        assert!(b.take(10.0, t1).is_ok());
        assert!(b.take(1.0, t1).is_err());
        b.set(1000.0, 10.0, t1);
        assert!(b.take(1.0, t1 + Duration::from_millis(1)).is_ok());
    }
}
