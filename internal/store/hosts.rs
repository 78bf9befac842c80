//! libpq's multi-host URLs on PostgreSQL
//! (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`),
//! which sqlx does not parse: Feed connects to the first host that is up
//! and takes writes (any host that is up for a command that only reads,
//! unless the URL asks for `read-write`), as libpq does. After a failover
//! the pool's host may refuse connections or take no writes; each such
//! fault calls [`Hosts::suspect`], which asks every host again (one round
//! at a time, at most one every [`ROUND_GAP`], backing off while none
//! fits) and points the pool at the one that fits with
//! `Pool::set_connect_options`. Connections already open to the old host
//! end as they fail (see `role`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use sea_orm::DbErr;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgPool};
use sea_orm::sqlx::{self, ConnectOptions as _, Connection as _};

use super::connect_error::{Target, Unreachable, classify, unreachable_as};
use super::timeout::Hook;
use super::{redact, role};
use crate::backoff::Backoff;
use crate::{Error, Result};

/// The shortest time between two rounds of asking the hosts.
const ROUND_GAP: Duration = Duration::from_millis(500);
/// The longest wait between rounds while no host fits.
const ROUND_MAX: Duration = Duration::from_secs(1);
/// How long one host may take to log in and answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Stands for the host list while the rest of the URL is parsed.
const PLACEHOLDER: &str = "feed-host-list.invalid";

/// One `host:port` of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Addr {
    host: String,
    port: u16,
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// What one host said when asked.
#[derive(Debug)]
enum Probe {
    Writable,
    ReadOnly,
    Down(sqlx::Error),
}

/// The hosts of a multi-host URL, and which one the pool uses.
pub(super) struct Hosts {
    addrs: Vec<Addr>,
    /// Only a host that takes writes will do.
    writable: bool,
    /// The URL up to the host list (`postgres://user:password@`) and from
    /// its end, `target_session_attrs` taken out: a host's own URL is
    /// `head + host:port + tail`.
    head: String,
    tail: String,
    pool: OnceLock<PgPool>,
    /// The index of the host the pool connects to.
    current: Mutex<usize>,
    /// A round of asking is going on or due.
    following: AtomicBool,
    last_round: Mutex<Option<Instant>>,
}

impl fmt::Debug for Hosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the head: it holds the password.
        f.debug_struct("Hosts")
            .field("addrs", &self.addrs)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

/// The host list of a URL's authority and where it lies in the URL; None
/// for a URL without `://`.
fn host_list(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..end].rfind('@').map_or(start, |i| start + i + 1);
    Some((at, end))
}

/// The URL with a placeholder for a host list of several hosts, and the
/// list; None for a URL with one host. For `redact`.
pub(super) fn one_host(url: &str) -> Option<(String, &str)> {
    let (at, end) = host_list(url)?;
    let list = &url[at..end];
    list.contains(',')
        .then(|| (format!("{}{PLACEHOLDER}{}", &url[..at], &url[end..]), list))
}

/// [`redact`] for a URL whose host list the placeholder stands for.
pub(super) fn put_back(redacted: &str, list: &str) -> String {
    redacted.replacen(PLACEHOLDER, list, 1)
}

/// Splits `h1:5432,[::1]:5433,h3` into addresses (5432 by default).
fn addrs(list: &str) -> std::result::Result<Vec<Addr>, String> {
    list.split(',')
        .map(|entry| {
            let (host, port) = match entry.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
                    let port = p
                        .parse::<u16>()
                        .map_err(|_| format!("{entry:?}: the port must be a number"))?;
                    (h, port)
                }
                _ => (entry, 5432),
            };
            if host.is_empty() || host.starts_with('%') || host.starts_with('/') {
                return Err(format!(
                    "{entry:?}: each host of the list must be a host name or address (not empty, not a socket path)"
                ));
            }
            Ok(Addr {
                host: host.trim_start_matches('[').trim_end_matches(']').into(),
                port,
            })
        })
        .collect()
}

/// The URL's query without `target_session_attrs`, and whether it asks
/// for a host that takes writes.
fn session_attrs(query: &str) -> std::result::Result<(String, bool), String> {
    let mut writable = false;
    let mut rest = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if k != "target_session_attrs" {
            rest.append_pair(&k, &v);
            continue;
        }
        writable = match &*v {
            "read-write" | "primary" => true,
            "any" => false,
            other => {
                return Err(format!(
                    "target_session_attrs={other} is not supported: use read-write (or primary, \
                     or any for commands that only read)"
                ));
            }
        };
    }
    Ok((rest.finish(), writable))
}

impl Hosts {
    /// The hosts of a PostgreSQL URL naming several; None for one host.
    /// `writes`: the store writes, so only the primary will do.
    pub(super) fn parse(url: &str, writes: bool) -> Result<Option<Hosts>> {
        let bad = |why: String| Error::DatabaseUrl(format!("{}: {why}", redact(url)));
        let Some((at, end)) = host_list(url) else {
            return Ok(None);
        };
        if !url[at..end].contains(',') {
            return Ok(None);
        }
        let addrs = addrs(&url[at..end]).map_err(bad)?;
        let (path, query) = url[end..].split_once('?').unwrap_or((&url[end..], ""));
        let (query, asks) = session_attrs(query).map_err(bad)?;
        let tail = match query.is_empty() {
            true => path.to_string(),
            false => format!("{path}?{query}"),
        };
        let hosts = Hosts {
            addrs,
            writable: writes || asks,
            head: url[..at].to_string(),
            tail,
            pool: OnceLock::new(),
            current: Mutex::new(0),
            following: AtomicBool::new(false),
            last_round: Mutex::new(None),
        };
        for i in 0..hosts.addrs.len() {
            if let Err(e) = url::Url::parse(&hosts.url(i)) {
                return Err(bad(format!(
                    "{e}; expected e.g. postgres://user:password@h1:5432,h2:5432/db"
                )));
            }
        }
        Ok(Some(hosts))
    }

    /// The URL of host `i` alone.
    fn url(&self, i: usize) -> String {
        let a = &self.addrs[i];
        let host = match a.host.contains(':') {
            true => format!("[{}]", a.host),
            false => a.host.clone(),
        };
        format!("{}{host}:{}{}", self.head, a.port, self.tail)
    }

    /// Picks the first host that fits, as the store is opened: its URL.
    /// When none does, an `Unusable` refusal if a host gave one, else
    /// `Error::Connect` with what each host said.
    pub(super) async fn pick(&self, target: &Target) -> Result<String> {
        let base: PgConnectOptions = self.url(0).parse().map_err(|e| classify(&e, target))?;
        let probes = self.round(&base).await;
        if let Some(i) = self.fitting(&probes) {
            *self.current.lock().expect("hosts lock") = i;
            return Ok(self.url(i));
        }
        for (i, p) in probes.iter().enumerate() {
            if let Probe::Down(e) = p {
                let one = Target {
                    url: self.url(i),
                    driver: target.driver,
                    create: target.create,
                    existing_only: target.existing_only,
                };
                let err = classify(e, &one);
                if !matches!(err, Error::Connect { .. }) {
                    return Err(err);
                }
            }
        }
        Err(unreachable_as(
            target,
            Unreachable::Other(self.said(&probes)),
        ))
    }

    /// What each host said, for a message.
    fn said(&self, probes: &[Probe]) -> String {
        let each: Vec<String> = probes
            .iter()
            .zip(&self.addrs)
            .map(|(p, a)| match p {
                Probe::Writable => format!("{a}: takes writes"),
                Probe::ReadOnly => format!("{a}: takes no writes (a standby)"),
                Probe::Down(e) => format!("{a}: {}", redact_error(e, &self.head)),
            })
            .collect();
        let want = if self.writable {
            "takes writes"
        } else {
            "answers"
        };
        format!("no host of the list {want} ({})", each.join("; "))
    }

    /// The first host that fits, in the list's order (as libpq).
    fn fitting(&self, probes: &[Probe]) -> Option<usize> {
        probes.iter().position(|p| match p {
            Probe::Writable => true,
            Probe::ReadOnly => !self.writable,
            Probe::Down(_) => false,
        })
    }

    /// Asks every host at once.
    async fn round(&self, base: &PgConnectOptions) -> Vec<Probe> {
        *self.last_round.lock().expect("hosts lock") = Some(Instant::now());
        let asks = self.addrs.iter().map(|a| probe(base, a));
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
        let me = Arc::downgrade(self);
        tokio::spawn(follow(me));
    }
}

/// Rounds of asking, paced, until the pool's host fits again or another
/// one that fits has replaced it; ends with the store.
async fn follow(me: Weak<Hosts>) {
    let mut backoff = Backoff::new(ROUND_GAP, ROUND_MAX);
    static NONE: crate::ratelog::Every = crate::ratelog::Every::new();
    loop {
        let Some(hosts) = me.upgrade() else { return };
        let since = hosts
            .last_round
            .lock()
            .expect("hosts lock")
            .map(|t| t.elapsed());
        let wait = since.map_or(Duration::ZERO, |s| ROUND_GAP.saturating_sub(s));
        drop(hosts);
        tokio::time::sleep(wait).await;
        let Some(hosts) = me.upgrade() else { return };
        let Some(pool) = hosts.pool.get() else { return };
        let base = (*pool.connect_options()).clone();
        let probes = hosts.round(&base).await;
        let current = *hosts.current.lock().expect("hosts lock");
        let settled = match hosts.fitting(&probes) {
            Some(_) if hosts.fits(&probes[current]) => true,
            Some(i) => {
                let (from, to) = (&hosts.addrs[current], &hosts.addrs[i]);
                tracing::warn!(%from, %to, "the database host changed (a failover): new connections go to the new one");
                pool.set_connect_options(with_addr(base, to));
                *hosts.current.lock().expect("hosts lock") = i;
                true
            }
            None => {
                if let Some(n) = NONE.due() {
                    tracing::warn!(rounds = n, hosts = %hosts.said(&probes), "looking for the database's primary");
                }
                false
            }
        };
        if settled {
            NONE.over();
            hosts.following.store(false, Ordering::SeqCst);
            return;
        }
        drop(hosts);
        backoff.wait().await;
    }
}

impl Hosts {
    fn fits(&self, p: &Probe) -> bool {
        matches!(p, Probe::Writable) || (!self.writable && matches!(p, Probe::ReadOnly))
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
        Err(_) => Probe::Down(sqlx::Error::PoolTimedOut),
    }
}

/// A driver's error as text, with whatever of the URL's head it quotes
/// (the password) left out.
fn redact_error(e: &sqlx::Error, head: &str) -> String {
    let text = match e {
        sqlx::Error::PoolTimedOut => format!("no answer within {PROBE_TIMEOUT:?}"),
        e => e.to_string(),
    };
    text.replace(head, "")
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

/// For the LISTEN connection: the URL of the host the store would pick
/// (the first that takes writes) for a multi-host URL, the URL itself
/// for one host; what each host said when none fits.
pub(crate) async fn primary_url(url: &str) -> std::result::Result<String, String> {
    let Ok(Some(hosts)) = Hosts::parse(url, true) else {
        return Ok(url.to_string());
    };
    let base: PgConnectOptions = hosts
        .url(0)
        .parse()
        .map_err(|e: sqlx::Error| e.to_string())?;
    let probes = hosts.round(&base).await;
    match hosts.fitting(&probes) {
        Some(i) => Ok(hosts.url(i)),
        None => Err(hosts.said(&probes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str, writes: bool) -> Hosts {
        Hosts::parse(url, writes).unwrap().expect("several hosts")
    }

    #[test]
    fn a_host_list_is_split_with_default_ports_and_each_host_gets_its_url() {
        let h = parsed(
            "postgres://u:p@h1:5433,10.0.0.2,[::1]:5434/feed?target_session_attrs=read-write&sslmode=disable",
            false,
        );
        let shown: Vec<String> = h.addrs.iter().map(Addr::to_string).collect();
        assert_eq!(shown, ["h1:5433", "10.0.0.2:5432", "::1:5434"]);
        assert!(h.writable, "read-write asks for the primary");
        assert_eq!(h.url(0), "postgres://u:p@h1:5433/feed?sslmode=disable");
        assert_eq!(
            h.url(1),
            "postgres://u:p@10.0.0.2:5432/feed?sslmode=disable"
        );
        assert_eq!(h.url(2), "postgres://u:p@[::1]:5434/feed?sslmode=disable");
    }

    #[test]
    fn a_reading_store_takes_any_host_unless_the_url_asks_for_the_primary() {
        assert!(!parsed("postgres://h1,h2/db", false).writable);
        assert!(!parsed("postgres://h1,h2/db?target_session_attrs=any", false).writable);
        assert!(parsed("postgres://h1,h2/db?target_session_attrs=primary", false).writable);
        assert!(
            parsed("postgres://h1,h2/db", true).writable,
            "a store that writes"
        );
        assert_eq!(
            parsed("postgresql://h1,h2", true).url(1),
            "postgresql://h2:5432"
        );
    }

    #[test]
    fn one_host_is_not_a_list() {
        for url in [
            "postgres://u:p,w@h1:5432/db",
            "postgres://h1/db?options=a,b",
            "postgres://h1/db?target_session_attrs=read-write",
        ] {
            assert!(Hosts::parse(url, true).unwrap().is_none(), "{url}");
        }
    }

    #[test]
    fn bad_lists_are_refused_with_the_password_hidden() {
        for (url, says) in [
            (
                "postgres://u:secret@h1:x,h2/db",
                "the port must be a number",
            ),
            ("postgres://u:secret@h1,,h2/db", "must be a host name"),
            (
                "postgres://u:secret@h1,h2:99999/db",
                "the port must be a number",
            ),
            (
                "postgres://u:secret@h1,h2/db?target_session_attrs=standby",
                "target_session_attrs=standby is not supported",
            ),
        ] {
            let e = Hosts::parse(url, true).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
            assert!(e.contains("u:***@h1"), "{e}");
        }
    }

    #[test]
    fn redact_hides_the_password_of_a_host_list() {
        assert_eq!(
            redact("postgres://u:pw@h1:5432,h2:5433/db?password=x&target_session_attrs=read-write"),
            "postgres://u:***@h1:5432,h2:5433/db?password=***&target_session_attrs=read-write"
        );
    }

    #[test]
    fn faults_of_the_host_are_told_from_conflicts() {
        use sea_orm::RuntimeErr;
        let io = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert!(host_fault(&DbErr::Conn(RuntimeErr::SqlxError(Arc::new(
            io
        )))));
        let other = DbErr::Custom("no".into());
        assert!(!host_fault(&other));
    }
}
