//! A tenant's rate driven end to end on a simulated clock: a bucket as
//! `Store::reserve` keeps it, the limits task's reservations, and a
//! dispatch that looks at its items only when something wakes it.

use tokio::time::{Duration, Instant};

use super::task::came_due;
use super::*;

/// `feed_buckets`' arithmetic (`Store::reserve`), in seconds from `t0`.
struct Bucket {
    t0: Instant,
    rate: f64,
    burst: f64,
    paid: f64,
}

impl Bucket {
    /// Reserves `n` tokens at `now`: in how many microseconds the first
    /// may be spent.
    fn reserve(&mut self, n: f64, now: Instant) -> i64 {
        let now = now.duration_since(self.t0).as_secs_f64();
        let start = self.paid.max(now);
        self.paid = start + n / self.rate;
        ((start - self.burst / self.rate - now) * 1e6).round() as i64
    }
}

/// Items sent in `secs` seconds by `processors` processors sharing a
/// tenant's `rate`, each with items always waiting, 10 ms round trips to
/// the database, and a dispatch that looks at its items only when woken:
/// by a reservation's arrival, by its one-second poll, or (`wake_when_due`)
/// by the limits task when a token it waited for comes due.
fn sent(rate: f64, processors: usize, secs: u64, wake_when_due: bool) -> usize {
    let t0 = Instant::now();
    let trip = Duration::from_millis(10);
    let mut pools: Vec<Pool> = (0..processors)
        .map(|_| Pool::new("tenant:a".into(), rate, None, 1, t0))
        .collect();
    let mut bucket = Bucket {
        t0,
        rate,
        burst: pools[0].burst,
        paid: 0.0,
    };
    let mut wake = vec![t0; processors];
    let mut arrives: Vec<Option<(Instant, f64, i64)>> = vec![None; processors];
    let mut count = 0;
    let end = t0 + Duration::from_secs(secs);
    let mut t = t0;
    while t < end {
        for (i, p) in pools.iter_mut().enumerate() {
            // The limits task: a reservation arrives a round trip after it
            // was asked for, and wakes dispatch.
            match arrives[i] {
                Some((at, n, offset)) if at <= t => {
                    p.reserved(n, offset, at - trip, t);
                    arrives[i] = None;
                    wake[i] = t;
                }
                None if p.wanted(t) && p.short(t) => {
                    let n = p.want(t);
                    arrives[i] = Some((t + trip, n, bucket.reserve(n, t)));
                }
                _ => {}
            }
            if wake_when_due && p.came_due(t) == Ok(true) {
                wake[i] = t;
            }
            // Dispatch, when woken: sends while tokens are due.
            if t >= wake[i] {
                p.mature(t);
                while p.spend(t).is_ok() {
                    count += 1;
                }
                p.wait(t);
                wake[i] = t + Duration::from_secs(1);
            }
        }
        t += Duration::from_millis(1);
    }
    count
}

/// The cause of rates below about 100/s delivering a fraction of
/// themselves: a tenant held back is told no instant to look again at, so
/// a token that comes due between the reservations' arrivals waits for the
/// next arrival or poll, and a reservation follows what was spent, so
/// fewer tokens spent meant fewer, smaller reservations to wake dispatch.
/// Woken when its token comes due, every rate holds (the first burst
/// apart).
#[test]
fn a_tenant_held_back_is_woken_when_its_token_comes_due() {
    for rate in [1.0, 5.0, 20.0, 50.0, 200.0] {
        for processors in [1, 3] {
            let secs = 20;
            let want = rate * secs as f64;
            let got = sent(rate, processors, secs, true) as f64;
            let burst = Pool::new(String::new(), rate, None, 1, Instant::now()).burst;
            assert!(
                got >= want - 1.0 && got <= want + burst + 1.0,
                "{rate}/s, {processors} processors: {got} in {secs} s"
            );
            // Unwoken, one processor sent 3/s of 5/s, 4/s of 20/s, 13/s
            // of 50/s (with 10 ms calls each call's answer woke it too).
            if processors == 1 && rate >= 5.0 {
                let unwoken = sent(rate, processors, secs, false) as f64;
                assert!(unwoken < want * 0.7, "{rate}/s unwoken: {unwoken}");
            }
        }
    }
}

/// The limits task wakes dispatch once when a token a send waited for
/// comes due, and says when that will be until then.
#[test]
fn the_limits_task_wakes_dispatch_when_a_token_comes_due() {
    let limits = Limits::new(None, None, 1);
    let t0 = Instant::now();
    {
        let mut s = limits.lock();
        s.loaded = true;
        let mut pool = Pool::new("tenant:a".into(), 5.0, None, 1, t0);
        // One token, due in 200 ms.
        pool.reserved(1.0, 0, t0, t0);
        s.tenants.insert(
            "a".into(),
            TenantState {
                rate: Some(pool),
                ..TenantState::default()
            },
        );
    }
    let mut gate = limits.gate();
    assert_eq!(gate.admit(Some(&"a".into())), Err(Blocked::Tenant));
    drop(gate);
    let due = t0 + Duration::from_millis(200);
    let next = came_due(&limits, t0);
    assert!(
        next >= due && next <= due + Duration::from_millis(20),
        "{:?}",
        next - t0
    );
    assert!(!woken(&limits));
    // Still waited for well after a second of no demand: not forgotten.
    let later = t0 + Duration::from_secs(3);
    came_due(&limits, later);
    assert!(woken(&limits));
    came_due(&limits, later);
    assert!(!woken(&limits), "woken once");
}

/// Whether dispatch was woken (takes the wake-up).
fn woken(limits: &Limits) -> bool {
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let notified = std::pin::pin!(limits.ready.notified());
    notified.poll(&mut cx).is_ready()
}
