//! Retry delays: exponential with jitter, capped.

use std::time::Duration;

/// The delay before attempt `attempt + 1`: `base * 2^(attempt-1)` capped at
/// `max`, then a random value between half of it and all of it, so retries
/// of many items spread out instead of arriving together.
pub fn delay(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(30));
    let capped = exp.min(max);
    let half = capped / 2;
    half + half.mul_f64(rand::random::<f64>())
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
}
