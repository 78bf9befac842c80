//! Guessing a token is slowed to a crawl without locking anyone else out.
//!
//! Failed attempts are counted per client (an IPv4 address, or an IPv6
//! /64, which one machine usually owns whole) and per kind of token (admin:
//! API actions and the login form; producer: enqueueing), so a producer
//! sending a wrong token locks out neither other producers nor the admin.
//! A client that used up its allowance is refused with 429 until it
//! refills, even with the right token, so that guessing gains nothing.
//!
//! A backstop counts the failed attempts of all clients together (a
//! guesser with many addresses). Once it is used up it refuses only the
//! clients that failed within the last [`REFILL`]: a client with a clean
//! record, such as an operator with the right token, always gets through.
//!
//! Failed attempts are logged at most once a minute per client, with the
//! address and how many there were.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts one client may make at once, then one more each
/// [`REFILL`] / this.
const PER_CLIENT: f64 = 10.0;

/// Failed attempts all clients together may make at once, refilled at the
/// same pace; past it, only clients with a failure in the last [`REFILL`]
/// are refused.
const OVERALL: f64 = 100.0;

/// How long an allowance takes to refill from empty; a client whose last
/// failure is this old has a clean record.
const REFILL: Duration = Duration::from_secs(60);

/// Clients remembered at most (per kind); clean ones are forgotten first.
const MAX_CLIENTS: usize = 100_000;

/// Which token a request tried: each kind has its own allowances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The admin token (API actions, the login form).
    Admin,
    /// A token offered to enqueue (the producer token, or the admin token).
    Producer,
}

impl Kind {
    /// The kind of a guarded request, by what it is (`enqueue`, `login`…).
    pub fn of(what: &str) -> Kind {
        if what == "enqueue" {
            Kind::Producer
        } else {
            Kind::Admin
        }
    }
}

/// One client's key: its IPv4 address, or the /64 of its IPv6 address.
fn key(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// One allowance of failed attempts.
#[derive(Debug)]
struct Allowance {
    left: f64,
    at: Instant,
    /// The last failure counted against it.
    failed: Option<Instant>,
    /// Failed attempts not logged yet, and when the last log line was.
    unlogged: u64,
    logged: Option<Instant>,
}

impl Allowance {
    fn full(size: f64, now: Instant) -> Self {
        Allowance {
            left: size,
            at: now,
            failed: None,
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

    /// How long until its last failure is [`REFILL`] old; None when it is.
    fn record(&self, now: Instant) -> Option<Duration> {
        let since = now - self.failed?;
        (since < REFILL).then(|| REFILL - since)
    }
}

/// The allowances of one kind of token.
#[derive(Debug)]
struct Allowances {
    by_client: HashMap<IpAddr, Allowance>,
    all: Allowance,
}

impl Allowances {
    fn new(now: Instant) -> Self {
        Allowances {
            by_client: HashMap::new(),
            all: Allowance::full(OVERALL, now),
        }
    }
}

/// The allowances, shared by every request of a console.
#[derive(Debug)]
pub struct Throttle {
    state: Mutex<HashMap<Kind, Allowances>>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            state: Mutex::new(HashMap::new()),
        }
    }
}

impl Throttle {
    /// Ok when `addr` may try a `kind` token now; else how long it must wait.
    pub fn admit(&self, kind: Kind, addr: IpAddr) -> Result<(), Duration> {
        self.with(kind, |a, now| {
            let all = a.all.refill(OVERALL, now);
            let Some(mine) = a.by_client.get_mut(&key(addr)) else {
                // Not remembered: a clean record, unless there was no room
                // to remember it (then the backstop decides).
                return match all {
                    Some(wait) if a.by_client.len() >= MAX_CLIENTS => Err(wait),
                    _ => Ok(()),
                };
            };
            if let Some(wait) = mine.refill(PER_CLIENT, now) {
                return Err(wait);
            }
            match (all, mine.record(now)) {
                (Some(_), Some(clean_in)) => Err(clean_in),
                _ => Ok(()),
            }
        })
    }

    /// Runs `f` on the allowances of `kind` under the lock, with the time now.
    fn with<T>(&self, kind: Kind, f: impl FnOnce(&mut Allowances, Instant) -> T) -> T {
        let mut s = self
            .state
            .lock()
            .expect("the throttle's lock is never poisoned");
        let now = Instant::now();
        f(s.entry(kind).or_insert_with(|| Allowances::new(now)), now)
    }

    /// Counts a failed attempt of `kind` from `addr`, and logs the
    /// client's failed attempts when its last line is a minute old.
    pub fn failed(&self, kind: Kind, addr: IpAddr, what: &str) {
        self.with(kind, |a, now| {
            a.all.refill(OVERALL, now);
            // The debt is bounded, so the backstop lifts within two refills.
            a.all.left = (a.all.left - 1.0).max(-OVERALL);
            let k = key(addr);
            if a.by_client.len() >= MAX_CLIENTS && !a.by_client.contains_key(&k) {
                a.by_client.retain(|_, c| {
                    c.refill(PER_CLIENT, now);
                    c.left < PER_CLIENT || c.record(now).is_some()
                });
                if a.by_client.len() >= MAX_CLIENTS {
                    return;
                }
            }
            let c = a
                .by_client
                .entry(k)
                .or_insert_with(|| Allowance::full(PER_CLIENT, now));
            c.refill(PER_CLIENT, now);
            c.left -= 1.0;
            c.failed = Some(now);
            c.unlogged += 1;
            if c.logged.is_none_or(|t| now - t >= REFILL) {
                tracing::warn!(
                    client = %addr,
                    attempts = c.unlogged,
                    token = ?kind,
                    "failed {what} attempts with a wrong token (logged at most once a minute per client)"
                );
                c.unlogged = 0;
                c.logged = Some(now);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_runs_out_and_others_do_not() {
        let t = Throttle::default();
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        for _ in 0..PER_CLIENT as usize {
            assert!(t.admit(Kind::Admin, a).is_ok());
            t.failed(Kind::Admin, a, "login");
        }
        let wait = t.admit(Kind::Admin, a).unwrap_err();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(6));
        assert!(
            t.admit(Kind::Admin, b).is_ok(),
            "another client still may try"
        );
        assert!(
            t.admit(Kind::Producer, a).is_ok(),
            "the other kind of token has its own allowance"
        );
    }

    #[test]
    fn the_backstop_stops_only_failing_clients() {
        let t = Throttle::default();
        for n in 0..OVERALL as u32 {
            let guesser = IpAddr::from((0x0a00_0000 + n % 20).to_be_bytes());
            t.failed(Kind::Admin, guesser, "API");
        }
        // A guesser that still has some of its own allowance is refused
        // until its last failure is a minute old.
        let wait = t.admit(Kind::Admin, ip("10.0.0.1")).unwrap_err();
        assert!(wait > Duration::from_secs(50), "{wait:?}");
        // A client with a clean record gets through, once.
        let operator = ip("192.168.1.9");
        assert!(t.admit(Kind::Admin, operator).is_ok());
        t.failed(Kind::Admin, operator, "API");
        assert!(t.admit(Kind::Admin, operator).is_err());
        assert!(t.admit(Kind::Producer, ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn an_ipv6_64_is_one_client() {
        let t = Throttle::default();
        for n in 0..PER_CLIENT as u32 {
            t.failed(Kind::Admin, ip(&format!("2001:db8:1:2::{n:x}")), "API");
        }
        assert!(t.admit(Kind::Admin, ip("2001:db8:1:2:ffff::1")).is_err());
        assert!(t.admit(Kind::Admin, ip("2001:db8:1:3::1")).is_ok());
        assert_eq!(key(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
    }
}
