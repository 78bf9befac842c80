//! Guessing the admin token is slowed to a crawl: failed attempts are
//! counted per client address and over all addresses, and once either
//! allowance runs out, attempts from there (or from everyone) are refused
//! with 429 until it refills, whether the token given is right or not.
//! Failed attempts are logged at most once a minute per address, with the
//! address and how many there were.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts one address may make at once, then one more each
/// [`REFILL`] / this.
const PER_ADDRESS: f64 = 10.0;

/// Failed attempts all addresses together may make at once (a guesser
/// with many addresses), refilled at the same pace.
const OVERALL: f64 = 100.0;

/// How long an allowance takes to refill from empty.
const REFILL: Duration = Duration::from_secs(60);

/// Addresses remembered at most; full allowances are forgotten first.
const MAX_ADDRESSES: usize = 10_000;

/// One allowance of failed attempts.
#[derive(Debug)]
struct Allowance {
    left: f64,
    at: Instant,
    /// Failed attempts not logged yet, and when the last log line was.
    unlogged: u64,
    logged: Option<Instant>,
}

impl Allowance {
    fn full(size: f64, now: Instant) -> Self {
        Allowance {
            left: size,
            at: now,
            unlogged: 0,
            logged: None,
        }
    }

    /// Refills for the time passed; the wait until one attempt is allowed.
    fn refill(&mut self, size: f64, now: Instant) -> Option<Duration> {
        let rate = size / REFILL.as_secs_f64();
        self.left = (self.left + rate * (now - self.at).as_secs_f64()).min(size);
        self.at = now;
        (self.left < 1.0).then(|| Duration::from_secs_f64((1.0 - self.left) / rate))
    }
}

/// The allowances, shared by every request of a console.
#[derive(Debug)]
pub struct Throttle {
    state: Mutex<(HashMap<IpAddr, Allowance>, Allowance)>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            state: Mutex::new((HashMap::new(), Allowance::full(OVERALL, Instant::now()))),
        }
    }
}

impl Throttle {
    /// Ok when `addr` may try a token now; else how long it must wait.
    pub fn admit(&self, addr: IpAddr) -> Result<(), Duration> {
        self.with(|by_addr, all, now| {
            let mine = by_addr
                .get_mut(&addr)
                .and_then(|a| a.refill(PER_ADDRESS, now));
            match (mine, all.refill(OVERALL, now)) {
                (None, None) => Ok(()),
                (a, b) => Err(a.max(b).unwrap_or_default()),
            }
        })
    }

    /// Runs `f` on the allowances (per address, overall) under the lock,
    /// with the time now.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut HashMap<IpAddr, Allowance>, &mut Allowance, Instant) -> T,
    ) -> T {
        let mut s = self
            .state
            .lock()
            .expect("the throttle's lock is never poisoned");
        let (by_addr, all) = &mut *s;
        f(by_addr, all, Instant::now())
    }

    /// Counts a failed attempt from `addr`, and logs the address's failed
    /// attempts when its last line is a minute old.
    pub fn failed(&self, addr: IpAddr, what: &str) {
        self.with(|by_addr, all, now| {
            all.left -= 1.0;
            if by_addr.len() >= MAX_ADDRESSES && !by_addr.contains_key(&addr) {
                by_addr.retain(|_, a| {
                    a.refill(PER_ADDRESS, now);
                    a.left < PER_ADDRESS
                });
            }
            let a = by_addr
                .entry(addr)
                .or_insert_with(|| Allowance::full(PER_ADDRESS, now));
            a.refill(PER_ADDRESS, now);
            a.left -= 1.0;
            a.unlogged += 1;
            if a.logged.is_none_or(|t| now - t >= REFILL) {
                tracing::warn!(
                    client = %addr,
                    attempts = a.unlogged,
                    "failed {what} attempts with a wrong admin token (logged at most once a minute per address)"
                );
                a.unlogged = 0;
                a.logged = Some(now);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_runs_out_and_others_do_not() {
        let t = Throttle::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..PER_ADDRESS as usize {
            assert!(t.admit(a).is_ok());
            t.failed(a, "login");
        }
        let wait = t.admit(a).unwrap_err();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(6));
        assert!(t.admit(b).is_ok(), "another address still may try");
    }

    #[test]
    fn everyone_together_runs_out() {
        let t = Throttle::default();
        for n in 0..OVERALL as u32 {
            t.failed(IpAddr::from(n.to_be_bytes()), "login");
        }
        assert!(t.admit("10.9.9.9".parse().unwrap()).is_err());
    }
}
