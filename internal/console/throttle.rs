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
//! So does a client the table has no room for (it remembers
//! [`MAX_CLIENTS`]): its failures count against the backstop only, and a
//! token of 128 random bits or more is what keeps such a flood from
//! guessing it.
//!
//! Failed attempts are logged at most once a minute per kind of token,
//! whatever the number of clients: how many there were, from how many
//! clients, and the latest client's address.

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

/// Clients remembered at most (per kind) by default; clean ones are
/// forgotten first.
pub(super) const MAX_CLIENTS: usize = 100_000;

/// How often the table is swept of clean clients when it is full.
const SWEEP: Duration = Duration::from_secs(1);

/// Which token a request tried: each kind has its own allowances. A wrong
/// token at the enqueue route counts as both (it may be a guess at the
/// admin token, which that route also takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// The admin token (API actions, the login form).
    Admin,
    /// A producer token.
    Producer,
}

/// One client's key: its IPv4 address, or the /64 of its IPv6 address.
pub(crate) fn key(addr: IpAddr) -> IpAddr {
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
}

impl Allowance {
    fn full(size: f64, now: Instant) -> Self {
        Allowance {
            left: size,
            at: now,
            failed: None,
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
    /// When the full table was last swept of clean clients.
    swept: Option<Instant>,
    log: Unlogged,
}

impl Allowances {
    fn new(now: Instant) -> Self {
        Allowances {
            by_client: HashMap::new(),
            all: Allowance::full(OVERALL, now),
            swept: None,
            log: Unlogged::default(),
        }
    }

    /// Room for client `k`: true when it is remembered or there is room
    /// to remember it, after sweeping clean clients (at most once per
    /// [`SWEEP`], so that a flood of new addresses costs no scan each).
    fn room_for(&mut self, k: IpAddr, now: Instant, max: usize) -> bool {
        if self.by_client.len() < max || self.by_client.contains_key(&k) {
            return true;
        }
        if self.swept.is_none_or(|t| now - t >= SWEEP) {
            self.swept = Some(now);
            self.by_client.retain(|_, c| {
                c.refill(PER_CLIENT, now);
                c.left < PER_CLIENT || c.record(now).is_some()
            });
        }
        self.by_client.len() < max
    }
}

/// Failed attempts not logged yet: one line a minute per kind of token
/// sums them, so a flood from many addresses writes no more than one.
#[derive(Debug, Default)]
struct Unlogged {
    attempts: u64,
    /// Clients with a failure since the last line (each counted once,
    /// unless the table had no room to remember it).
    clients: u64,
    /// When the last line was written.
    at: Option<Instant>,
}

/// The allowances, shared by every request of a console.
#[derive(Debug)]
pub(super) struct Throttle {
    state: Mutex<HashMap<Kind, Allowances>>,
    /// Clients remembered at most per kind.
    max_clients: usize,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::remembering(MAX_CLIENTS)
    }
}

impl Throttle {
    /// A throttle that remembers at most `max_clients` clients per kind.
    pub(super) fn remembering(max_clients: usize) -> Self {
        Throttle {
            state: Mutex::new(HashMap::new()),
            max_clients,
        }
    }

    /// Ok when `addr` may try a `kind` token now; else how long it must wait.
    pub(super) fn admit(&self, kind: Kind, addr: IpAddr) -> Result<(), Duration> {
        self.with(kind, |a, now| {
            let all = a.all.refill(OVERALL, now);
            let Some(mine) = a.by_client.get_mut(&key(addr)) else {
                // Not remembered: a clean record as far as anyone knows,
                // even when the table is full.
                return Ok(());
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
    /// failed attempts of `kind` when the last line is a minute old.
    pub(super) fn failed(&self, kind: Kind, addr: IpAddr, what: &str) {
        self.with(kind, |a, now| {
            a.all.refill(OVERALL, now);
            // The debt is bounded, so the backstop lifts within two refills.
            a.all.left = (a.all.left - 1.0).max(-OVERALL);
            let k = key(addr);
            let since_log = a.log.at;
            let new_client = if a.room_for(k, now, self.max_clients) {
                let c = a
                    .by_client
                    .entry(k)
                    .or_insert_with(|| Allowance::full(PER_CLIENT, now));
                c.refill(PER_CLIENT, now);
                c.left -= 1.0;
                let new = match (c.failed, since_log) {
                    (Some(f), Some(l)) => f < l,
                    (f, _) => f.is_none(),
                };
                c.failed = Some(now);
                new
            } else {
                true
            };
            a.log.attempts += 1;
            a.log.clients += u64::from(new_client);
            if since_log.is_none_or(|t| now - t >= REFILL) {
                tracing::warn!(
                    attempts = a.log.attempts,
                    clients = a.log.clients,
                    latest = %addr,
                    token = ?kind,
                    "failed {what} attempts with a wrong token (logged at most once a minute per kind of token)"
                );
                a.log = Unlogged {
                    at: Some(now),
                    ..Unlogged::default()
                };
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
    fn a_full_table_refuses_no_new_client() {
        let t = Throttle::default();
        // More failing clients than the table holds, each failing twice
        // (so none is clean): the backstop is used up many times over.
        for n in 0..(MAX_CLIENTS as u32 + 1_000) {
            let guesser = IpAddr::from((0x0b00_0000 + n).to_be_bytes());
            t.failed(Kind::Admin, guesser, "API");
            t.failed(Kind::Admin, guesser, "API");
        }
        let operator = ip("192.168.1.9");
        assert!(
            t.admit(Kind::Admin, operator).is_ok(),
            "a client never seen is let through"
        );
        // A remembered guesser is still refused.
        assert!(t.admit(Kind::Admin, ip("11.0.0.1")).is_err());
        t.with(Kind::Admin, |a, _| {
            assert_eq!(a.by_client.len(), MAX_CLIENTS);
            // The first failure was logged at once; every later one is
            // summed for the next line, each remembered client counted
            // once and each failure of the others as a client.
            assert_eq!(a.log.attempts, 2 * (MAX_CLIENTS as u64 + 1_000) - 1);
            assert_eq!(a.log.clients, MAX_CLIENTS as u64 - 1 + 2_000);
        });
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
