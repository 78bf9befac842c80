//! A processor's part of a shared rate: tokens reserved from a bucket in
//! `feed_buckets` (see `Store::reserve`), spent here as they come due.
//!
//! A reservation of `n` tokens is paid for over `n / rate` seconds of the
//! bucket's time; its k-th token may be spent from `start + k / rate`, so
//! a large reservation is spent at the rate, never all at once. The pool
//! keeps about twice the reservation's round trip of the whole rate
//! reserved ahead (at least two chunks), so that its own latency loses no
//! tokens; what it holds when its demand ends is all it can strand.

use std::collections::VecDeque;

use tokio::time::{Duration, Instant};

use super::DEMAND;

/// Tokens are reserved this many seconds' worth at a time at least (and
/// at least one batch); the bucket lets two such chunks go at once by
/// default.
const CHUNK_SECONDS: f64 = 0.05;
/// Chunks a pool keeps reserved at least while it has demand.
const AHEAD: f64 = 2.0;
/// Round trips of the whole rate a pool keeps reserved ahead.
const LATENCIES: f64 = 2.0;

/// Tokens reserved from a shared bucket, spent here.
#[derive(Debug)]
pub(super) struct Pool {
    /// The bucket's row in `feed_buckets`.
    pub name: String,
    pub rate: f64,
    pub burst: f64,
    /// Tokens reserved at a time at least.
    chunk: f64,
    /// Tokens that may be spent now.
    tokens: f64,
    /// Reservations not wholly come due yet, oldest first.
    reserved: VecDeque<Reservation>,
    /// A reservation's round trip, smoothed.
    latency: Duration,
    /// When a send last needed a token of this pool.
    pub wanted_at: Option<Instant>,
    /// The next reservation waits until then (after a failure).
    pub not_before: Instant,
}

/// Tokens reserved: the k-th of `n` may be spent from `start + k / rate`.
#[derive(Debug)]
struct Reservation {
    start: Instant,
    n: f64,
    /// Of them, moved to the spendable tokens.
    due: f64,
}

impl Pool {
    /// A pool for the bucket `name`, for sends of up to `batch` items.
    pub fn new(name: String, rate: f64, burst: Option<u32>, batch: usize, now: Instant) -> Self {
        let chunk = (rate * CHUNK_SECONDS).ceil().max(batch as f64).max(1.0);
        Self {
            name,
            rate,
            burst: burst.map_or(chunk * 2.0, f64::from).max(chunk),
            chunk,
            tokens: 0.0,
            reserved: VecDeque::new(),
            latency: Duration::ZERO,
            wanted_at: None,
            not_before: now,
        }
    }

    /// Whether a send wanted a token lately.
    pub fn wanted(&self, now: Instant) -> bool {
        self.wanted_at
            .is_some_and(|t| now.saturating_duration_since(t) < DEMAND)
    }

    /// Moves reserved tokens that have come due to the spendable ones.
    pub fn mature(&mut self, now: Instant) {
        while let Some(r) = self.reserved.front_mut() {
            let elapsed = now.saturating_duration_since(r.start).as_secs_f64();
            let due = (elapsed * self.rate).floor().min(r.n);
            if due > r.due {
                self.tokens += due - r.due;
                r.due = due;
            }
            if r.due < r.n {
                break;
            }
            self.reserved.pop_front();
        }
    }

    /// Spends one token if one is due (after `mature`), or says when the
    /// next comes due (None: none is reserved).
    pub fn spend(&mut self) -> Result<(), Option<Instant>> {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(self
            .reserved
            .front()
            .map(|r| r.start + Duration::from_secs_f64((r.due + 1.0) / self.rate)))
    }

    /// Gives back a token spent for a send that did not go.
    pub fn refund(&mut self) {
        self.tokens += 1.0;
    }

    /// Whether a token may be spent now.
    pub fn spendable(&self, now: Instant) -> bool {
        self.tokens >= 1.0
            || self.reserved.front().is_some_and(|r| {
                now.saturating_duration_since(r.start).as_secs_f64() * self.rate >= r.due + 1.0
            })
    }

    fn held(&self) -> f64 {
        self.tokens + self.reserved.iter().map(|r| r.n - r.due).sum::<f64>()
    }

    fn ahead(&self) -> f64 {
        (self.chunk * AHEAD).max(self.rate * self.latency.as_secs_f64() * LATENCIES)
    }

    /// Whether it holds fewer tokens (due or not) than it keeps ahead.
    pub fn short(&self) -> bool {
        self.held() < self.ahead()
    }

    /// How many tokens to reserve next.
    pub fn want(&self) -> f64 {
        (self.ahead() - self.held()).ceil().max(self.chunk)
    }

    /// Takes in a reservation of `n` tokens, made at `asked` and answered
    /// at `now`, whose first may be spent `offset` microseconds from now
    /// (negative: some are due already).
    pub fn reserved(&mut self, n: f64, offset: i64, asked: Instant, now: Instant) {
        let trip = now.saturating_duration_since(asked);
        self.latency = if self.latency.is_zero() {
            trip
        } else {
            (self.latency * 7 + trip) / 8
        };
        let shift = Duration::from_micros(offset.unsigned_abs());
        let start = if offset >= 0 {
            now + shift
        } else {
            now.checked_sub(shift).unwrap_or(now)
        };
        self.reserved.push_back(Reservation { start, n, due: 0.0 });
    }

    /// Drops every token held (nobody wants them).
    pub fn forget(&mut self) {
        self.tokens = 0.0;
        self.reserved.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_comes_due_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pool::new("fleet".into(), 100.0, None, 1, t0);
        assert_eq!((p.chunk, p.burst), (5.0, 10.0));
        assert!(p.short());
        assert_eq!(p.spend(), Err(None));
        // 50 tokens whose first is due in 10 ms: one every 10 ms from then.
        p.reserved(50.0, 10_000, t0, t0);
        assert!(!p.short());
        p.mature(t0);
        assert_eq!(p.spend(), Err(Some(t0 + Duration::from_millis(20))));
        let t1 = t0 + Duration::from_millis(55);
        assert!(p.spendable(t1));
        p.mature(t1);
        for _ in 0..4 {
            assert!(p.spend().is_ok());
        }
        assert!(p.spend().is_err());
        // All of it by its end, never more.
        let t2 = t0 + Duration::from_secs(2);
        p.mature(t2);
        let mut spent = 4;
        while p.spend().is_ok() {
            spent += 1;
        }
        assert_eq!(spent, 50);
        assert!(p.reserved.is_empty());
    }

    #[test]
    fn it_keeps_its_round_trip_reserved_ahead() {
        let t0 = Instant::now();
        let mut p = Pool::new("fleet".into(), 1000.0, None, 1, t0);
        // A negative offset: some are due at once (the bucket's burst).
        p.reserved(p.want(), -20_000, t0, t0 + Duration::from_millis(200));
        p.mature(t0 + Duration::from_millis(300));
        assert_eq!(p.tokens, 100.0);
        // A 200 ms round trip: it keeps 400 ms of the rate reserved.
        assert_eq!(p.want(), 400.0 - 100.0);
        p.forget();
        assert_eq!(p.held(), 0.0);
    }
}
