//! A rate as users write it (`500/s`, `30/m`, `1000/h`) and the local
//! token bucket that paces sends at such a rate.

use std::fmt;
use std::str::FromStr;

use tokio::time::{Duration, Instant};

/// Items per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "{s:?} is not a rate: write a positive count per unit, e.g. 500/s, 30/m or 1000/h"
            )
        };
        let (count, unit) = s.trim().split_once('/').unwrap_or((s.trim(), "s"));
        let count: f64 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => 1.0,
            "m" | "min" | "minute" => 60.0,
            "h" | "hour" => 3600.0,
            _ => return Err(bad()),
        };
        if !(count.is_finite() && count > 0.0) {
            return Err(bad());
        }
        Ok(Rate(count / per))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1.0 || self.0 == 0.0 {
            write!(f, "{}/s", round(self.0))
        } else {
            write!(f, "{}/m", round(self.0 * 60.0))
        }
    }
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// A token bucket on this processor's clock: `rate` tokens a second, at
/// most `burst` saved up.
#[derive(Clone, Debug)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A bucket that starts with one burst's worth.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Changes the rate, keeping what is saved up (within the new burst).
    pub fn set(&mut self, rate: f64, burst: f64, now: Instant) {
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
    pub fn take(&mut self, n: f64, now: Instant) -> Result<(), Instant> {
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
    fn rates_parse_in_every_unit() {
        assert_eq!("500/s".parse::<Rate>(), Ok(Rate(500.0)));
        assert_eq!("30/m".parse::<Rate>(), Ok(Rate(0.5)));
        assert_eq!("3600/h".parse::<Rate>(), Ok(Rate(1.0)));
        assert_eq!("250".parse::<Rate>(), Ok(Rate(250.0)));
        for bad in ["", "0/s", "-1/s", "ten/s", "5/d", "inf/s"] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains("e.g. 500/s"), "{bad}: {e}");
        }
        assert_eq!(Rate(500.0).to_string(), "500/s");
        assert_eq!(Rate(0.5).to_string(), "30/m");
    }

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
