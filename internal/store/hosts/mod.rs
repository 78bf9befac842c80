//! libpq's multi-host URLs on PostgreSQL
//! (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`),
//! which sqlx does not parse. Feed connects to the first host of the list
//! that takes writes, as libpq's `read-write` does; a store that only
//! reads takes the first that answers when none does, unless the URL asks
//! for `read-write` (or `primary`). After a failover the pool's host
//! refuses connections or takes no writes: each such fault calls
//! [`Hosts::suspect`], which asks every host again (one round at a time,
//! at most one every [`ROUND_GAP`] and one a second while none fits) and
//! points the pool at the host that fits with `Pool::set_connect_options`.
//! Connections still open to the old host end as they fail (see `role`).

mod list;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use sea_orm::DbErr;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgPool};
use sea_orm::sqlx::{self, ConnectOptions as _, Connection as _};

use super::connect_error::{Target, Unreachable, classify, unreachable_as};
use super::role;
use super::timeout::Hook;
use crate::backoff::Backoff;
use crate::{Error, Result};
use list::{Addr, List};
pub(crate) use list::{one_host, put_back};

/// The shortest time between two rounds of asking the hosts.
const ROUND_GAP: Duration = Duration::from_millis(500);
/// The longest wait between rounds while no host fits.
const ROUND_MAX: Duration = Duration::from_secs(1);
/// How long one host may take to log in and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a statement may take before the hosts are asked: a pool whose
/// host refuses connections retries them silently until its acquire
/// timeout.
const SLOW: Duration = Duration::from_secs(1);

/// What one host said when asked.
#[derive(Debug)]
enum Probe {
    Writable,
    ReadOnly,
    Down(sqlx::Error),
    /// No answer within [`PROBE_TIMEOUT`].
    Silent,
}

/// The hosts of a multi-host URL, and which one the pool uses.
#[derive(Debug)]
pub(super) struct Hosts {
    list: List,
    /// Only a host that takes writes will do.
    writes: bool,
    pool: OnceLock<PgPool>,
    /// The index of the host the pool connects to.
    current: Mutex<usize>,
    /// A round of asking is going on or due.
    following: AtomicBool,
    last_round: Mutex<Option<Instant>>,
}

impl Hosts {
    /// The hosts of a PostgreSQL URL naming several; None for one host.
    /// `writes`: the store writes, so only the primary will do.
    pub(super) fn parse(url: &str, writes: bool) -> Result<Option<Hosts>> {
        Ok(List::parse(url)?.map(|list| Hosts {
            writes: writes || list.asks_writes,
            list,
            pool: OnceLock::new(),
            current: Mutex::new(0),
            following: AtomicBool::new(false),
            last_round: Mutex::new(None),
        }))
    }

    /// Picks the host as the store is opened: its URL. When none fits, an
    /// `Unusable` refusal if a host gave one, else `Error::Connect` with
    /// what each host said.
    pub(super) async fn pick(&self, target: &Target) -> Result<String> {
        let base: PgConnectOptions = self.list.url(0).parse().map_err(|e| classify(&e, target))?;
        let probes = self.round(&base).await;
        if let Some(i) = self.fitting(&probes) {
            *self.current.lock().expect("hosts lock") = i;
            return Ok(self.list.url(i));
        }
        for (i, p) in probes.iter().enumerate() {
            let Probe::Down(e) = p else { continue };
            let one = Target {
                url: self.list.url(i),
                driver: target.driver,
                create: target.create,
                existing_only: target.existing_only,
            };
            let err = classify(e, &one);
            if !matches!(err, Error::Connect { .. }) {
                return Err(err);
            }
        }
        let said = Unreachable::Other(self.said(&probes));
        Err(unreachable_as(target, said))
    }

    /// What each host said, for a message.
    fn said(&self, probes: &[Probe]) -> String {
        let each: Vec<String> = probes
            .iter()
            .zip(&self.list.addrs)
            .map(|(p, a)| match p {
                Probe::Writable => format!("{a}: takes writes"),
                Probe::ReadOnly => format!("{a}: takes no writes (a standby)"),
                Probe::Down(e) => format!("{a}: {}", self.list.clean(&e.to_string())),
                Probe::Silent => format!("{a}: no answer within {PROBE_TIMEOUT:?}"),
            })
            .collect();
        let want = if self.writes {
            "takes writes"
        } else {
            "answers"
        };
        format!("no host of the list {want} ({})", each.join("; "))
    }

    /// Whether a host that said `p` will do.
    fn fits(&self, p: &Probe) -> bool {
        match p {
            Probe::Writable => true,
            Probe::ReadOnly => !self.writes,
            Probe::Down(_) | Probe::Silent => false,
        }
    }

    /// The first host that takes writes, in the list's order (as libpq);
    /// for a store that only reads, else the first that answers.
    fn fitting(&self, probes: &[Probe]) -> Option<usize> {
        probes
            .iter()
            .position(|p| matches!(p, Probe::Writable))
            .or_else(|| probes.iter().position(|p| self.fits(p)))
    }

    /// Asks every host at once.
    async fn round(&self, base: &PgConnectOptions) -> Vec<Probe> {
        *self.last_round.lock().expect("hosts lock") = Some(Instant::now());
        let asks = self.list.addrs.iter().map(|a| probe(base, a));
        futures_util::future::join_all(asks).await
    }

    /// The pool whose host this follows, once the store is open.
    pub(super) fn attach(&self, pool: PgPool) {
        let _ = self.pool.set(pool);
    }

    /// The pool's host refused a connection, failed one, or takes no
    /// writes: unless a round is going on already, start one.
    pub(super) fn suspect(self: &Arc<Self>) {
        if self.pool.get().is_none() || self.following.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(follow(Arc::downgrade(self)));
    }

    /// One round: true when the pool's host fits again, or the pool now
    /// connects to another that does.
    async fn settle(&self, pool: &PgPool) -> bool {
        static NONE: crate::ratelog::Every = crate::ratelog::Every::new();
        let base = (*pool.connect_options()).clone();
        let probes = self.round(&base).await;
        let mut current = self.current.lock().expect("hosts lock");
        let Some(i) = self.fitting(&probes) else {
            if let Some(n) = NONE.due() {
                let hosts = self.said(&probes);
                tracing::warn!(rounds = n, %hosts, "looking for the database's primary");
            }
            return false;
        };
        NONE.over();
        if !self.fits(&probes[*current]) {
            let (from, to) = (&self.list.addrs[*current], &self.list.addrs[i]);
            tracing::warn!(%from, %to, "the database host changed (a failover): new connections go to the new one");
            pool.set_connect_options(with_addr(base, to));
            *current = i;
        }
        true
    }
}

/// Rounds of asking, paced, until [`Hosts::settle`] says done; ends with
/// the store.
async fn follow(me: Weak<Hosts>) {
    let mut backoff = Backoff::new(ROUND_GAP, ROUND_MAX);
    loop {
        let Some(hosts) = me.upgrade() else { return };
        let last = *hosts.last_round.lock().expect("hosts lock");
        let wait = last.map_or(Duration::ZERO, |t| ROUND_GAP.saturating_sub(t.elapsed()));
        drop(hosts);
        tokio::time::sleep(wait).await;
        let Some(hosts) = me.upgrade() else { return };
        let Some(pool) = hosts.pool.get() else { return };
        if hosts.settle(pool).await {
            hosts.following.store(false, Ordering::SeqCst);
            return;
        }
        drop(hosts);
        backoff.wait().await;
    }
}

fn with_addr(base: PgConnectOptions, a: &Addr) -> PgConnectOptions {
    base.host(&a.host).port(a.port)
}

/// Logs in to one host and asks whether it takes writes.
async fn probe(base: &PgConnectOptions, a: &Addr) -> Probe {
    let ask = async {
        let mut conn = with_addr(base.clone(), a).connect().await?;
        let writable = role::writable(&mut conn).await;
        let _ = conn.close().await;
        writable
    };
    match tokio::time::timeout(PROBE_TIMEOUT, ask).await {
        Ok(Ok(true)) => Probe::Writable,
        Ok(Ok(false)) => Probe::ReadOnly,
        Ok(Err(e)) => Probe::Down(e),
        Err(_) => Probe::Silent,
    }
}

/// Whether an error says the store's host may be gone or no longer the
/// primary: a connection that failed or could not be had, a statement
/// refused as read-only, a server shutting down (57P0x) or a connection
/// exception (08xxx); not a conflict the database asks to retry.
pub(super) fn host_fault(e: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    if super::driver::is_wrong_node(e) {
        return true;
    }
    let e = match e {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return false,
    };
    match e.as_database_error() {
        None => matches!(
            e.as_ref(),
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_)
        ),
        Some(d) => d
            .code()
            .is_some_and(|c| c.starts_with("57P0") || c.starts_with("08")),
    }
}

/// `call`, with a round of asking when it takes longer than [`SLOW`].
pub(super) async fn watched<F: Future>(hosts: Option<&Arc<Hosts>>, call: F) -> F::Output {
    let Some(hosts) = hosts else {
        return call.await;
    };
    let mut call = std::pin::pin!(call);
    tokio::select! {
        r = &mut call => return r,
        _ = tokio::time::sleep(SLOW) => hosts.suspect(),
    }
    call.await
}

/// sqlx's `after_connect` hook wrapped: a connection refused by the role
/// check (the host takes no writes) starts a round of asking.
pub(super) fn checked<'c>(hook: Hook<'c, ()>, hosts: Option<Arc<Hosts>>) -> Hook<'c, ()> {
    Box::pin(async move {
        let r = hook.await;
        if let (Err(_), Some(h)) = (&r, &hosts) {
            h.suspect();
        }
        r
    })
}

/// For the LISTEN connection, which needs the primary: for a multi-host
/// URL the URL of the first host that takes writes (what each host said
/// when none does); any other URL as it is.
pub(crate) async fn primary_url(url: &str) -> std::result::Result<String, String> {
    let Ok(Some(hosts)) = Hosts::parse(url, true) else {
        return Ok(url.to_string());
    };
    let base: PgConnectOptions = hosts
        .list
        .url(0)
        .parse()
        .map_err(|e: sqlx::Error| hosts.list.clean(&e.to_string()))?;
    let probes = hosts.round(&base).await;
    match hosts.fitting(&probes) {
        Some(i) => Ok(hosts.list.url(i)),
        None => Err(hosts.said(&probes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(url: &str, writes: bool) -> Hosts {
        Hosts::parse(url, writes).unwrap().expect("several hosts")
    }

    #[test]
    fn the_first_host_that_takes_writes_is_picked_and_a_reader_falls_back_to_a_standby() {
        let down = || Probe::Down(sqlx::Error::PoolTimedOut);
        let probes = [down(), Probe::ReadOnly, Probe::Writable, Probe::Writable];
        let url = "postgres://h1,h2,h3,h4/db";
        assert_eq!(hosts(url, true).fitting(&probes), Some(2));
        assert_eq!(hosts(url, false).fitting(&probes), Some(2), "a reader too");
        let standbys = [down(), Probe::Silent, Probe::ReadOnly];
        assert_eq!(hosts(url, false).fitting(&standbys), Some(2));
        assert_eq!(hosts(url, true).fitting(&standbys), None);
        let asks = "postgres://h1,h2/db?target_session_attrs=read-write";
        assert_eq!(
            hosts(asks, false).fitting(&standbys[1..]),
            None,
            "read-write asked"
        );
    }

    #[test]
    fn none_fitting_says_what_each_host_said() {
        let h = hosts("postgres://u:pw@h1,h2:5433,h3/db", true);
        let said = h.said(&[
            Probe::Down(sqlx::Error::Io(
                std::io::ErrorKind::ConnectionRefused.into(),
            )),
            Probe::ReadOnly,
            Probe::Silent,
        ]);
        assert!(
            said.starts_with("no host of the list takes writes (h1:5432: "),
            "{said}"
        );
        assert!(
            said.contains("; h2:5433: takes no writes (a standby); h3:5432: no answer within 3s)"),
            "{said}"
        );
    }

    #[test]
    fn faults_of_the_host_are_told_from_conflicts() {
        use sea_orm::RuntimeErr;
        let io = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert!(host_fault(&DbErr::Conn(RuntimeErr::SqlxError(Arc::new(
            io
        )))));
        assert!(host_fault(&DbErr::ConnectionAcquire(
            sea_orm::ConnAcquireErr::Timeout
        )));
        assert!(!host_fault(&DbErr::Custom("no".into())));
    }
}
