//! The last five minutes of a processor's handler calls and queue waits,
//! kept as histograms in memory and written with each heartbeat into its
//! session row (`feed_processors.figures`), so that the console, the API
//! and `processor status` give the fleet's percentiles and the handler's
//! state from the database alone: Prometheus has the same series per
//! processor, but a page cannot merge them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Histogram buckets: the upper bounds are 1 ms × 2^i for i below this
/// (1 ms to about 2.3 hours), and one more bucket holds the rest.
pub const BOUNDS: usize = 24;

/// A window's slots; each covers [`SLOT`], the newest one still filling.
const SLOTS: usize = 10;

/// One slot's span: ten of them make the five minutes.
const SLOT: Duration = Duration::from_secs(30);

/// A count per bucket (the last one past every bound).
type Buckets = [u64; BOUNDS + 1];

/// One slot's counts.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The slot's number since the window started; counts of an older
    /// number are stale.
    at: u64,
    calls: u64,
    failed: u64,
    handler: Buckets,
    wait: Buckets,
}

impl Slot {
    const EMPTY: Slot = Slot {
        at: u64::MAX,
        calls: 0,
        failed: 0,
        handler: [0; BOUNDS + 1],
        wait: [0; BOUNDS + 1],
    };
}

/// The bucket that `d` falls in.
fn bucket(d: Duration) -> usize {
    let ms = d.as_secs_f64() * 1000.0;
    (0..BOUNDS)
        .find(|&i| ms <= (1u64 << i) as f64)
        .unwrap_or(BOUNDS)
}

/// A processor's last five minutes.
#[derive(Debug)]
pub(crate) struct Recent {
    started: Instant,
    slots: Mutex<[Slot; SLOTS]>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            started: Instant::now(),
            slots: Mutex::new([Slot::EMPTY; SLOTS]),
        }
    }
}

impl Recent {
    /// The current slot's number.
    fn now(&self) -> u64 {
        (self.started.elapsed().as_secs_f64() / SLOT.as_secs_f64()) as u64
    }

    /// Runs `f` on the current slot, emptied first when it is stale.
    fn with(&self, f: impl FnOnce(&mut Slot)) {
        let at = self.now();
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut slots[(at % SLOTS as u64) as usize];
        if slot.at != at {
            *slot = Slot { at, ..Slot::EMPTY };
        }
        f(slot);
    }

    /// Counts a handler call that took `took`; `failed` when it was a
    /// failed attempt of every item it carried (or found no handler).
    pub(crate) fn call(&self, took: Duration, failed: bool) {
        self.with(|s| {
            s.calls += 1;
            s.failed += u64::from(failed);
            s.handler[bucket(took)] += 1;
        });
    }

    /// Counts an item's wait from ready to delivered.
    pub(crate) fn wait(&self, waited: Duration) {
        self.with(|s| s.wait[bucket(waited)] += 1);
    }

    /// What the heartbeat writes: the window's sums, the calls of the
    /// last minute, deliveries in flight and the request timeout.
    pub(crate) fn figures(&self, in_flight: u64, timeout: Duration) -> Figures {
        let at = self.now();
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut f = Figures {
            in_flight,
            timeout_ms: timeout.as_millis() as u64,
            handler_ms: vec![0; BOUNDS + 1],
            wait_ms: vec![0; BOUNDS + 1],
            ..Figures::default()
        };
        for s in slots
            .iter()
            .filter(|s| s.at <= at && at - s.at < SLOTS as u64)
        {
            f.calls += s.calls;
            f.failed += s.failed;
            if at - s.at < 2 {
                f.calls_last_minute += s.calls;
            }
            for (sum, n) in f.handler_ms.iter_mut().zip(s.handler) {
                *sum += n;
            }
            for (sum, n) in f.wait_ms.iter_mut().zip(s.wait) {
                *sum += n;
            }
        }
        // The last minute is the slot filling now and the one before it.
        let elapsed = self.started.elapsed().as_secs_f64();
        let covered = (elapsed % SLOT.as_secs_f64() + SLOT.as_secs_f64()).min(elapsed);
        f.calls_per_second = f.calls_last_minute as f64 / covered.max(1.0);
        f
    }
}

/// A processor's figures over its last five minutes, as its session row
/// keeps them (`feed_processors.figures`, JSON). Histograms count per
/// bucket: bucket i holds what took at most 2^i ms (and more than the
/// bucket before), the last bucket what took longer than every bound.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[non_exhaustive]
pub struct Figures {
    /// Deliveries in progress.
    pub in_flight: u64,
    /// Handler calls started and answered in the window.
    pub calls: u64,
    /// Of them, calls that were a failed attempt of every item they
    /// carried, or found no handler.
    pub failed: u64,
    /// Calls in the last 30 to 60 seconds.
    pub calls_last_minute: u64,
    /// Calls per second over the last 30 to 60 seconds.
    pub calls_per_second: f64,
    /// Its `--request-timeout`, in ms.
    pub timeout_ms: u64,
    /// Handler call latency, per bucket.
    pub handler_ms: Vec<u64>,
    /// Items' queue wait (ready to delivered), per bucket.
    pub wait_ms: Vec<u64>,
}

/// p50, p95 and p99 of a fleet's histogram, in milliseconds, with how
/// many it counts; estimated within a bucket as Prometheus's
/// `histogram_quantile` does (linearly between its bounds).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
#[non_exhaustive]
pub struct Percentiles {
    /// How many calls or items the figures count.
    pub count: u64,
    /// The median.
    pub p50_ms: f64,
    /// The 95th percentile.
    pub p95_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
}

impl Percentiles {
    /// The percentiles of `buckets`; None when it counts nothing.
    pub fn of(buckets: &[u64]) -> Option<Percentiles> {
        let count: u64 = buckets.iter().sum();
        (count > 0).then(|| Percentiles {
            count,
            p50_ms: quantile(buckets, count, 0.50),
            p95_ms: quantile(buckets, count, 0.95),
            p99_ms: quantile(buckets, count, 0.99),
        })
    }
}

/// The `q` quantile of `count` values in `buckets`.
fn quantile(buckets: &[u64], count: u64, q: f64) -> f64 {
    let rank = q * count as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            if i >= BOUNDS {
                // Past every bound: its lower bound is all that is known.
                return (1u64 << (BOUNDS - 1)) as f64;
            }
            let upper = (1u64 << i) as f64;
            let lower = if i == 0 { 0.0 } else { upper / 2.0 };
            return lower + (upper - lower) * (rank - below as f64) / n as f64;
        }
        below += n;
    }
    (1u64 << (BOUNDS - 1)) as f64
}

/// Adds `more` into `sum`, bucket by bucket.
fn add(sum: &mut Vec<u64>, more: &[u64]) {
    if sum.len() < more.len() {
        sum.resize(more.len(), 0);
    }
    for (s, n) in sum.iter_mut().zip(more) {
        *s += n;
    }
}

/// The handler as the fleet saw it over the last five minutes.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[non_exhaustive]
pub struct HandlerState {
    /// `held off` (a processor's dispatch holds off: `reason` says why),
    /// `failing` (at least [`FAILING`] of the calls failed), `slow` (p95
    /// at half the request timeout or more), `answering`, or `idle` (no
    /// call in the window).
    pub state: &'static str,
    /// Why, in words.
    pub reason: String,
    /// Calls per second over the last minute, all processors.
    pub calls_per_second: f64,
    /// The share of the window's calls that failed (0 to 1); None
    /// without calls.
    pub failed_share: Option<f64>,
    /// Handler call latency.
    pub latency: Option<Percentiles>,
}

/// The share of failed calls at which the handler is called failing.
pub const FAILING: f64 = 0.1;

/// The fleet's figures, merged from its processors' rows.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[non_exhaustive]
pub struct Fleet {
    /// The handler's state and latency.
    pub handler: HandlerState,
    /// Items' queue wait, from ready to delivered.
    pub queue_wait: Option<Percentiles>,
}

impl Fleet {
    /// Merges processors' figures; `held`: the reasons of processors
    /// whose dispatch holds off.
    pub fn merge<'a>(
        figures: impl IntoIterator<Item = &'a Figures>,
        held: impl IntoIterator<Item = &'a str>,
    ) -> Fleet {
        let (mut handler, mut wait) = (Vec::new(), Vec::new());
        let (mut calls, mut failed, mut per_second, mut timeout) = (0, 0, 0.0, u64::MAX);
        for f in figures {
            add(&mut handler, &f.handler_ms);
            add(&mut wait, &f.wait_ms);
            calls += f.calls;
            failed += f.failed;
            per_second += f.calls_per_second;
            if f.timeout_ms > 0 {
                timeout = timeout.min(f.timeout_ms);
            }
        }
        let latency = Percentiles::of(&handler);
        let failed_share = (calls > 0).then(|| failed as f64 / calls as f64);
        let held: Vec<&str> = held.into_iter().collect();
        let (state, reason) = if let Some(why) = held.first() {
            (
                "held off",
                format!("{} of the processors hold dispatch off: {why}", held.len()),
            )
        } else if calls == 0 {
            ("idle", "no handler call in the last 5 minutes".to_string())
        } else if let Some(share) = failed_share.filter(|s| *s >= FAILING) {
            let shown = format!(
                "{:.0} % of the calls in the last 5 minutes failed",
                share * 100.0
            );
            ("failing", shown)
        } else if let Some(p) = latency.filter(|p| p.p95_ms * 2.0 >= timeout as f64) {
            let shown = format!(
                "p95 {:.0} ms, half the request timeout ({timeout} ms) or more",
                p.p95_ms
            );
            ("slow", shown)
        } else {
            ("answering", format!("{calls} calls in the last 5 minutes"))
        };
        Fleet {
            handler: HandlerState {
                state,
                reason,
                calls_per_second: per_second,
                failed_share,
                latency,
            },
            queue_wait: Percentiles::of(&wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_milliseconds() {
        assert_eq!(bucket(Duration::from_micros(500)), 0);
        assert_eq!(bucket(Duration::from_millis(1)), 0);
        assert_eq!(bucket(Duration::from_micros(1500)), 1);
        assert_eq!(bucket(Duration::from_millis(50)), 6);
        assert_eq!(bucket(Duration::from_secs(100_000)), BOUNDS);
    }

    #[test]
    fn percentiles_interpolate_within_a_bucket() {
        // 100 values of 33–64 ms (bucket 6): the median in the middle.
        let mut b = vec![0; BOUNDS + 1];
        b[6] = 100;
        let p = Percentiles::of(&b).unwrap();
        assert_eq!((p.count, p.p50_ms, p.p99_ms), (100, 48.0, 63.68));
        // 90 fast, 10 slow: p50 fast, p95 and p99 slow.
        let mut b = vec![0; BOUNDS + 1];
        b[1] = 90;
        b[10] = 10;
        let p = Percentiles::of(&b).unwrap();
        assert!(p.p50_ms <= 2.0 && p.p95_ms > 512.0, "{p:?}");
        assert_eq!(Percentiles::of(&[0; 4]), None);
    }

    #[test]
    fn a_window_forgets_nothing_recent_and_merges() {
        let r = Recent::default();
        for _ in 0..9 {
            r.call(Duration::from_millis(40), false);
            r.wait(Duration::from_millis(3));
        }
        r.call(Duration::from_millis(40), true);
        let f = r.figures(3, Duration::from_secs(30));
        assert_eq!((f.calls, f.failed, f.in_flight), (10, 1, 3));
        assert_eq!(f.calls_last_minute, 10);
        let fleet = Fleet::merge([&f, &f], []);
        assert_eq!(fleet.handler.state, "failing");
        assert_eq!(fleet.handler.latency.unwrap().count, 20);
        assert_eq!(fleet.queue_wait.unwrap().count, 18);
        let fleet = Fleet::merge([&f], ["the handler is not there"]);
        assert_eq!(fleet.handler.state, "held off");
        assert_eq!(Fleet::merge([], []).handler.state, "idle");
        // A slow handler: 40 ms against a 50 ms timeout.
        let mut ok = r.figures(0, Duration::from_millis(50));
        ok.failed = 0;
        assert_eq!(Fleet::merge([&ok], []).handler.state, "slow");
        ok.timeout_ms = 30_000;
        assert_eq!(Fleet::merge([&ok], []).handler.state, "answering");
    }
}
