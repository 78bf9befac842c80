//! Backpressure from the handler: the rate this processor sends at after
//! the handler said "too many" (a 429, or a 503 with `Retry-After`).
//!
//! Additive increase, multiplicative decrease: a throttle answer drops the
//! rate to `DECREASE` of what the handler accepted over the last second
//! (at most once a second, so one burst of throttle answers counts once;
//! and not in the first second of answers, which is too short to measure
//! a rate by). Each second the rate binds without a throttle answer it
//! grows by `INCREASE` of the rate it was dropped to, and the growth
//! doubles every quiet second, so that a rate dropped far below the
//! handler's capacity (by a burst) finds it again within seconds. A
//! handler with a hidden capacity C is so sent between 0.8 C and C, about
//! 0.9 C on average, with a short burst of throttle answers every few
//! seconds. After a quiet minute in which the rate never bound, there is
//! no rate again.

use std::collections::VecDeque;

use tokio::time::{Duration, Instant};

use super::bucket::Bucket;

/// Share of the accepted rate a throttle answer drops to.
const DECREASE: f64 = 0.8;
/// Growth per second, as a share of the rate last dropped to.
const INCREASE: f64 = 0.1;
/// Below this the rate never goes (items per second).
const FLOOR: f64 = 1.0;
/// The window the accepted rate is measured over.
const WINDOW: Duration = Duration::from_secs(1);
/// The step doubles after this long without a throttle answer (with 5 %
/// a second doubling every 2 s, a loaded machine's jitter kept a 300/s
/// handler at a median of 236/s).
const QUIET_DOUBLING: Duration = Duration::from_secs(1);
/// Without a throttle answer and without binding for this long, the rate goes.
const QUIET: Duration = Duration::from_secs(60);

/// The adaptive rate and what it is computed from.
#[derive(Debug)]
pub(super) struct Adaptive {
    /// None = not limited.
    bucket: Option<Bucket>,
    rate: f64,
    /// Items per second added each second the rate binds (doubling every
    /// `QUIET_DOUBLING` without a throttle answer).
    step: f64,
    /// When the step last doubled.
    doubled: Instant,
    /// When the rate last dropped.
    dropped: Option<Instant>,
    /// When it last grew.
    grown: Instant,
    /// When the rate last held back a send.
    bound: Option<Instant>,
    /// Answers accepted (not throttled) in the last window: (when, items).
    accepted: VecDeque<(Instant, usize)>,
    /// A batch's worth: the bucket holds at least this many.
    batch: f64,
    /// When the first answer came: the window is shorter before a whole
    /// one has passed.
    since: Option<Instant>,
}

impl Adaptive {
    /// No rate yet; `batch` items are sent at once at most.
    pub(super) fn new(batch: usize, now: Instant) -> Self {
        Self {
            bucket: None,
            rate: 0.0,
            step: 0.0,
            doubled: now,
            dropped: None,
            grown: now,
            bound: None,
            accepted: VecDeque::new(),
            batch: batch as f64,
            since: None,
        }
    }

    /// The current rate in items per second; None = not limited.
    pub(super) fn rate(&self) -> Option<f64> {
        self.bucket.as_ref().map(|_| self.rate)
    }

    fn burst(&self) -> f64 {
        (self.rate * 0.05).max(self.batch).max(1.0)
    }

    /// Takes `n` sends, or says when they may go.
    pub(super) fn take(&mut self, n: usize, now: Instant) -> Result<(), Instant> {
        let Some(bucket) = &mut self.bucket else {
            return Ok(());
        };
        bucket
            .take(n as f64, now)
            .inspect_err(|_| self.bound = Some(now))
    }

    /// Takes in a handler call's answer: `items` items, throttled or not.
    pub(super) fn answered(&mut self, items: usize, throttled: bool, now: Instant) {
        let since = *self.since.get_or_insert(now);
        while self
            .accepted
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > WINDOW)
        {
            self.accepted.pop_front();
        }
        if !throttled {
            self.accepted.push_back((now, items));
            self.grow(now);
            return;
        }
        let recent = |t: Instant| now.saturating_duration_since(t) < WINDOW;
        if self.dropped.is_some_and(recent) || recent(since) {
            return;
        }
        let accepted: usize = self.accepted.iter().map(|(_, n)| n).sum();
        let span = now
            .saturating_duration_since(since)
            .clamp(Duration::from_millis(10), WINDOW);
        let accepted = accepted as f64 / span.as_secs_f64();
        let from = if self.bucket.is_some() {
            self.rate.min(accepted)
        } else {
            accepted
        };
        self.rate = (from * DECREASE).max(FLOOR);
        tracing::info!(
            accepted = format!("{accepted:.0}/s"),
            rate = format!("{:.0}/s", self.rate),
            "the handler answered \"too many\": sending slower"
        );
        self.step = (self.rate * INCREASE).max(FLOOR);
        self.doubled = now;
        self.dropped = Some(now);
        self.grown = now;
        let burst = self.burst();
        match &mut self.bucket {
            Some(b) => b.set(self.rate, burst, now),
            None => self.bucket = Some(Bucket::new(self.rate, burst, now)),
        }
    }

    /// Grows the rate while it binds; lets it go after a quiet spell.
    fn grow(&mut self, now: Instant) {
        if self.bucket.is_none() {
            return;
        }
        let since = now.saturating_duration_since(self.grown);
        if since < Duration::from_millis(100) {
            return;
        }
        self.grown = now;
        let binds = self
            .bound
            .is_some_and(|t| now.saturating_duration_since(t) < WINDOW);
        if binds {
            if now.saturating_duration_since(self.doubled) >= QUIET_DOUBLING {
                self.doubled = now;
                self.step *= 2.0;
            }
            self.rate += self.step * since.as_secs_f64();
            let burst = self.burst();
            if let Some(b) = &mut self.bucket {
                b.set(self.rate, burst, now);
            }
            return;
        }
        let quiet =
            |t: Option<Instant>| t.is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
        if quiet(self.dropped) && quiet(self.bound) {
            self.bucket = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler that accepts `capacity` items a second, sent to as fast
    /// as the adaptive rate lets: the rate settles near the capacity and
    /// throttle answers are rare.
    #[test]
    fn settles_near_a_hidden_capacity() {
        let capacity = 300.0;
        let t0 = Instant::now();
        let mut a = Adaptive::new(1, t0);
        let mut sent_in_second: Vec<(u64, bool)> = Vec::new();
        let mut bucket = Bucket::new(capacity, capacity * 0.05, t0);
        let tick = Duration::from_micros(500);
        let mut now = t0;
        // 4,000 items/s offered (one every 250 µs, two per tick).
        for _ in 0..(40_000 * 2) {
            now += tick;
            for _ in 0..2 {
                if a.take(1, now).is_err() {
                    continue;
                }
                let ok = bucket.take(1.0, now).is_ok();
                a.answered(1, !ok, now);
                sent_in_second.push((now.duration_since(t0).as_secs(), ok));
            }
        }
        let after: Vec<&(u64, bool)> = sent_in_second.iter().filter(|(s, _)| *s >= 10).collect();
        let seconds = 30.0;
        let accepted = after.iter().filter(|(_, ok)| *ok).count() as f64 / seconds;
        let throttled = after.iter().filter(|(_, ok)| !*ok).count() as f64;
        assert!(
            (accepted - capacity).abs() / capacity < 0.2,
            "accepted {accepted}/s"
        );
        assert!(
            throttled / (after.len() as f64) < 0.05,
            "{throttled} throttled of {}",
            after.len()
        );
        assert!(a.rate().is_some());
    }

    #[test]
    fn lets_go_after_a_quiet_minute() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(1, t0);
        a.answered(1, false, t0);
        // Not in the first second of answers.
        a.answered(1, true, t0);
        assert_eq!(a.rate(), None);
        a.answered(1, true, t0 + WINDOW);
        assert!(a.rate().is_some());
        let later = t0 + WINDOW + QUIET + Duration::from_secs(1);
        a.answered(1, false, later);
        assert_eq!(a.rate(), None);
        assert!(a.take(1000, later).is_ok());
    }
}
