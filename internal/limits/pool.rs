//! A processor's part of a shared rate: tokens reserved from a bucket in
//! `feed_buckets` (see `Store::reserve`), spent here as they come due.
//!
//! A reservation of `n` tokens is paid for over `n / rate` seconds of the
//! bucket's time; its k-th token may be spent from `start + k / rate`, so
//! a large reservation is spent at the rate, never all at once. The pool
//! keeps reserved ahead what it spends in four of the reservation's round
//! trips (at least 200 ms of it), so that its own latency, even a spike
//! of it behind SQLite's writer, loses no tokens; it measures what it
//! spends, so that a processor with a little work now and then reserves
//! little, since what it holds when its demand ends is stranded.

use std::collections::VecDeque;

use tokio::time::{Duration, Instant};

use super::{DEMAND, Rate};

/// Tokens are reserved this many seconds' worth at a time at least (and
/// at least one batch); the bucket lets two such chunks go at once by
/// default.
const CHUNK_SECONDS: f64 = 0.05;
/// Seconds of its spending a pool keeps reserved at least (with a tenth
/// of a second, three processors sharing 2,000/s on SQLite lost a tenth
/// of it to spikes behind the writer).
const AHEAD_SECONDS: f64 = 0.2;
/// Round trips of its spending a pool keeps reserved ahead.
const LATENCIES: f64 = 4.0;
/// Seconds over which its spending is measured (the smoothing constant).
const PACE_SECONDS: f64 = 0.5;

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
    /// Tokens spent a second, smoothed, as of `spent_at`.
    pace: f64,
    spent_at: Instant,
    /// When a send last needed a token of this pool.
    pub wanted_at: Option<Instant>,
    /// A send was held back for want of a token since dispatch was last
    /// woken for one: until one comes due the pool counts as wanted, and
    /// the limits task wakes dispatch when it does (a tenant held back is
    /// told no instant to look again at, unlike the fleet).
    pub waiting: bool,
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
    /// A pool for the bucket `name`, for sends of up to `batch` items, at
    /// `rate` taken within what it can pace (see [`Rate::clamp`]).
    pub(super) fn new(
        name: String,
        rate: f64,
        burst: Option<u32>,
        batch: usize,
        now: Instant,
    ) -> Self {
        let rate = Rate::clamp(rate);
        let chunk = (rate * CHUNK_SECONDS).ceil().max(batch as f64).max(1.0);
        Self {
            name,
            rate,
            burst: burst.map_or(chunk * 2.0, f64::from).max(chunk),
            chunk,
            tokens: 0.0,
            reserved: VecDeque::new(),
            latency: Duration::ZERO,
            pace: 0.0,
            spent_at: now,
            wanted_at: None,
            waiting: false,
            not_before: now,
        }
    }

    /// Whether a send wanted a token lately, or waits for one.
    pub(super) fn wanted(&self, now: Instant) -> bool {
        self.waiting
            || self
                .wanted_at
                .is_some_and(|t| now.saturating_duration_since(t) < DEMAND)
    }

    /// Records that a send was held back for want of a token.
    pub(super) fn wait(&mut self, now: Instant) {
        self.wanted_at = Some(now);
        self.waiting = true;
    }

    /// For a pool a send waits on: whether a token has come due (the wait
    /// ends, and its demand counts from now), or else when the next will
    /// (None: none is reserved; the reservation's arrival wakes dispatch).
    pub(super) fn came_due(&mut self, now: Instant) -> Result<bool, Option<Instant>> {
        if !self.waiting {
            return Ok(false);
        }
        if self.spendable(now) {
            self.waiting = false;
            self.wanted_at = Some(now);
            return Ok(true);
        }
        Err(self.next_due())
    }

    /// When the next reserved token comes due.
    fn next_due(&self) -> Option<Instant> {
        self.reserved
            .front()
            .map(|r| r.start + Duration::from_secs_f64((r.due + 1.0) / self.rate))
    }

    /// Moves reserved tokens that have come due to the spendable ones.
    /// Tokens due while nothing was spent for longer than the burst lasts
    /// are dropped but for a burst: saved up, they would go on top of the
    /// next one. (A burst, not less: a processor held back for a moment,
    /// by its refill or by a busy machine, would otherwise lose what came
    /// due meanwhile, and the fleet send below its rate.)
    pub(super) fn mature(&mut self, now: Instant) {
        let quiet =
            now.saturating_duration_since(self.spent_at).as_secs_f64() * self.rate > self.burst;
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
        if quiet {
            self.tokens = self.tokens.min(self.burst);
        }
    }

    /// Spends one token if one is due (after `mature`), or says when the
    /// next comes due (None: none is reserved).
    pub(super) fn spend(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.pace = self.pace_at(now) + 1.0 / PACE_SECONDS;
            self.spent_at = now;
            return Ok(());
        }
        Err(self.next_due())
    }

    /// Gives back a token spent for a send that did not go.
    pub(super) fn refund(&mut self) {
        self.tokens += 1.0;
        self.pace = (self.pace - 1.0 / PACE_SECONDS).max(0.0);
    }

    /// Tokens spent a second lately (decayed since the last spend).
    fn pace_at(&self, now: Instant) -> f64 {
        let quiet = now.saturating_duration_since(self.spent_at).as_secs_f64();
        self.pace * (-quiet / PACE_SECONDS).exp()
    }

    /// Whether a token may be spent now.
    pub(super) fn spendable(&self, now: Instant) -> bool {
        self.tokens >= 1.0
            || self.reserved.front().is_some_and(|r| {
                now.saturating_duration_since(r.start).as_secs_f64() * self.rate >= r.due + 1.0
            })
    }

    fn held(&self) -> f64 {
        self.tokens + self.reserved.iter().map(|r| r.n - r.due).sum::<f64>()
    }

    /// What it keeps reserved: its spending (at most the rate) over the
    /// longer of `AHEAD_SECONDS` and `LATENCIES` round trips, and a chunk
    /// at least.
    fn ahead(&self, now: Instant) -> f64 {
        let horizon = AHEAD_SECONDS.max(self.latency.as_secs_f64() * LATENCIES);
        (self.pace_at(now).min(self.rate) * horizon).max(self.chunk)
    }

    /// Whether it holds fewer tokens (due or not) than it keeps ahead.
    pub(super) fn short(&self, now: Instant) -> bool {
        self.held() < self.ahead(now)
    }

    /// How many tokens to reserve next.
    pub(super) fn want(&self, now: Instant) -> f64 {
        (self.ahead(now) - self.held()).ceil().max(self.chunk)
    }

    /// Takes in a reservation of `n` tokens, made at `asked` and answered
    /// at `now`, whose first may be spent `offset` microseconds from now
    /// (negative: some are due already).
    pub(super) fn reserved(&mut self, n: f64, offset: i64, asked: Instant, now: Instant) {
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
    pub(super) fn forget(&mut self) {
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
        assert!(p.short(t0));
        assert_eq!(p.spend(t0), Err(None));
        // 50 tokens whose first is due in 10 ms: one every 10 ms from then.
        p.reserved(50.0, 10_000, t0, t0);
        assert!(!p.short(t0));
        p.mature(t0);
        assert_eq!(p.spend(t0), Err(Some(t0 + Duration::from_millis(20))));
        let t1 = t0 + Duration::from_millis(55);
        assert!(p.spendable(t1));
        p.mature(t1);
        for _ in 0..4 {
            assert!(p.spend(t1).is_ok());
        }
        assert!(p.spend(t1).is_err());
        // Spent as it comes due: all of it by its end, never more.
        let mut spent = 4;
        let mut t = t1;
        while t < t0 + Duration::from_secs(2) {
            t += Duration::from_millis(10);
            p.mature(t);
            while p.spend(t).is_ok() {
                spent += 1;
            }
        }
        assert_eq!(spent, 50);
        assert!(p.reserved.is_empty());
        // Due while nothing was spent for longer than the burst: a burst kept.
        p.reserved(50.0, 0, t, t);
        let later = t + Duration::from_secs(1);
        p.mature(later);
        assert_eq!(p.tokens, 10.0);
    }

    /// A pool spending the whole rate keeps four round trips of it
    /// reserved (200 ms at least); one that spends little, or stopped
    /// spending, keeps a chunk.
    #[test]
    fn it_reserves_ahead_what_it_spends() {
        let t0 = Instant::now();
        let mut p = Pool::new("fleet".into(), 1000.0, None, 1, t0);
        assert_eq!(p.want(t0), 50.0, "nothing spent yet: a chunk");
        // A negative offset: some are due at once (the bucket's burst).
        p.reserved(3000.0, -20_000, t0, t0 + Duration::from_millis(100));
        let mut t = t0 + Duration::from_millis(100);
        // Spend at the whole rate for two seconds.
        for _ in 0..2000 {
            t += Duration::from_millis(1);
            p.mature(t);
            let _ = p.spend(t);
        }
        let pace = p.pace_at(t);
        assert!((900.0..=1000.0).contains(&pace), "pace {pace}");
        // Round trips of 100 ms: 400 ms of it.
        let ahead = p.ahead(t);
        assert!((360.0..=400.0).contains(&ahead), "ahead {ahead}");
        // Quiet for two seconds: a chunk.
        assert_eq!(p.ahead(t + Duration::from_secs(2)), 50.0);
        p.forget();
        assert_eq!(p.held(), 0.0);
    }
}
