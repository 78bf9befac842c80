//! Opening a store: the pool, its settings per database, and a first
//! login that says why a database cannot be reached.
//!
//! A failure either lasts until someone acts (`Unusable`: no such
//! database, a refused login, an SQLite file that cannot be opened or
//! created; or a URL that does not parse) or may pass by itself
//! (`Unreachable`: refused, no answer); see `connect_error`. Commands exit
//! at once on the first, with what to do; `run` waits out the second.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use sea_orm::{ConnectOptions, Database, DbErr, RuntimeErr};

use super::connect_error::{
    CONNECT_TIMEOUT, Target, Unreachable, address, classify, clean, unreachable_as,
};
use super::driver;
use super::timeout::{self, Bound};
use super::{Clocked, Driver, Pooler, Store, hosts, nodelay, query_value, redact, role};
use crate::{Error, Result};

/// How a store connects, beyond its URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Connections in the pool (at least 2).
    pub max_connections: u32,
    /// The time limit on each statement attempt (`--statement-timeout`).
    pub statement_timeout: Duration,
    /// A connection older than this is closed when it goes back to the
    /// pool (`--db-max-lifetime`): the backstop that moves every connection
    /// off a node that changed role without closing them.
    pub max_lifetime: Duration,
    /// What stands between Feed and the database (`--db-pooler`).
    pub pooler: Pooler,
    /// Where statements read the time (the database clock; tests move it).
    pub clock: crate::config::Clock,
}

impl Options {
    /// The default connection lifetime (sqlx's).
    pub const MAX_LIFETIME: Duration = crate::config::Config::MAX_LIFETIME;

    /// A pool of `max_connections` with the other settings at their defaults.
    pub fn new(max_connections: u32) -> Options {
        Options {
            max_connections,
            statement_timeout: super::DEFAULT_STATEMENT_TIMEOUT,
            max_lifetime: Self::MAX_LIFETIME,
            pooler: Pooler::None,
            clock: crate::config::Clock::database(),
        }
    }
}

impl Store {
    /// Connects to a `sqlite:`, `postgres:` or `mysql:` (or `mariadb:`) URL.
    /// SQLite gets WAL and a busy timeout so readers never block the writer.
    ///
    /// ```no_run
    /// # async fn f() -> feed::Result<()> {
    /// let store = feed::Store::connect("postgres://feed:secret@db/feed", 8).await?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store> {
        Self::open(url, &Options::new(max_connections)).await
    }

    /// [`Store::connect`], but an SQLite file that does not exist is an
    /// error even with `mode=rwc`: a command that reads must not leave an
    /// empty database behind (run in the wrong folder, say).
    pub async fn connect_existing(url: &str, max_connections: u32) -> Result<Store> {
        Self::open_existing(url, &Options::new(max_connections)).await
    }

    /// [`Store::connect`] with a time limit on every statement attempt
    /// (acquiring a connection included): one cut off is retried on another
    /// connection, and a pooled connection that does not answer a ping
    /// within the limit is closed rather than reused.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        statement_timeout: Duration,
    ) -> Result<Store> {
        let mut options = Options::new(max_connections);
        options.statement_timeout = statement_timeout;
        Self::open(url, &options).await
    }

    /// [`Store::connect`] with every setting given.
    pub async fn open(url: &str, options: &Options) -> Result<Store> {
        open(url, options, true).await
    }

    /// [`Store::connect_existing`] with every setting given.
    pub async fn open_existing(url: &str, options: &Options) -> Result<Store> {
        open(url, options, false).await
    }
}

/// The URL as it is shown: password redacted, and an SQLite file as an
/// absolute path, so that "which database was that?" has one answer.
pub fn shown(url: &str) -> String {
    match driver::sqlite::file(url) {
        Some(path) => {
            let query = url.split_once('?').map(|(_, q)| format!("?{q}"));
            redact(&format!(
                "sqlite://{}{}",
                path.display(),
                query.unwrap_or_default()
            ))
        }
        None => redact(url),
    }
}

async fn open(url: &str, options: &Options, create: bool) -> Result<Store> {
    let limit = options.statement_timeout;
    let pooler = options.pooler;
    let mut target = target(url, create)?;
    if pooler == Pooler::Transaction && !target.driver.transaction_pooler() {
        return Err(Error::DatabaseUrl(format!(
            "{}: --db-pooler transaction is for PostgreSQL behind a pooler in transaction mode",
            redact(url)
        )));
    }
    let hosts = if target.driver.several_hosts() {
        hosts::Hosts::parse(&target.url, create)?.map(Arc::new)
    } else {
        None
    };
    if let Some(h) = &hosts {
        target.url = h.pick(&target).await?;
    }
    let url = target.url.as_str();
    if !target.driver.embedded() {
        first_login(&target, create).await?;
    }
    let mut opts = ConnectOptions::new(url);
    // No minimum: sqlx opens a pool's minimum outside its acquire timeout,
    // and one refused by the role check (a standby) then waits unbounded.
    opts.max_connections(options.max_connections.max(2))
        .min_connections(u32::from(target.driver.embedded()))
        .max_lifetime(options.max_lifetime)
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(Duration::from_secs(5))
        .set_application_name("feed-processor")
        .sqlx_logging(false);
    if target.driver.embedded() {
        // No network between Feed and the file: a connection cannot die
        // in the pool, and a ping is a hop to its worker thread and back.
        let existing_only = target.existing_only;
        opts.map_sqlx_sqlite_opts(move |o| {
            let o = driver::sqlite::connect_options(o);
            if existing_only {
                o.create_if_missing(false)
            } else {
                o
            }
        })
        .test_before_acquire(false);
    }
    let bound = Arc::new(Bound::new(limit));
    let released = bound.clone();
    // Commands that write (run, migrate, enqueue…) take no connection to a
    // server that cannot write; those that only read may read a standby.
    let primary = create;
    if pooler == Pooler::Transaction {
        // A cached statement would be looked for on another server.
        opts.map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0));
    }
    let follow = hosts.clone();
    opts.map_sqlx_postgres_pool_opts(move |o| {
        let (released, connected) = (released.clone(), released.clone());
        let follow = follow.clone();
        o.after_release(move |conn, _| role::pg_after_release(conn, &released))
            .after_connect(move |conn, _| {
                nodelay::set_on_open_sockets();
                let check = role::pg_after_connect(conn, primary, &connected);
                hosts::checked(check, follow.clone())
            })
    });
    let released = bound.clone();
    opts.map_sqlx_mysql_pool_opts(move |o| {
        let released = released.clone();
        o.after_release(move |conn, _| timeout::release_check(conn, &released))
            .after_connect(move |conn, _| {
                nodelay::set_on_open_sockets();
                timeout::end_idle_transactions(conn, limit)
            })
    });
    let db = Database::connect(opts).await.map_err(|e| match &e {
        DbErr::Conn(RuntimeErr::SqlxError(s)) => classify(s, &target),
        _ => unreachable_as(&target, Unreachable::Other(clean(&e.to_string(), url))),
    })?;
    if let Some(h) = &hosts {
        h.attach(db.get_postgres_connection_pool().clone());
    }
    let mut store = Store {
        hosts,
        db,
        driver: Clocked::new(target.driver, options.clock),
        statements: Counter::default(),
        bound,
        timeouts: Counter::default(),
        pooler,
        recent: Arc::default(),
    };
    if target.driver == Driver::Postgres && store.citus().await {
        store.driver = Clocked::new(Driver::Citus, options.clock);
    }
    Ok(store)
}

impl Store {
    /// Whether a PostgreSQL database has the Citus extension (a failed check
    /// counts as no: the statements that need Citus's SQL then say so).
    /// Through a transaction pooler too, as every statement runs.
    async fn citus(&self) -> bool {
        let check = sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT COUNT(*) AS n FROM pg_extension WHERE extname = 'citus'",
        );
        match self.query_all_raw(check).await {
            Ok(rows) => rows
                .first()
                .is_some_and(|r| r.try_get::<i64>("", "n").is_ok_and(|n| n > 0)),
            Err(_) => false,
        }
    }
}

/// Checks the URL's scheme and shape; what is being opened.
fn target(url: &str, create: bool) -> Result<Target> {
    let Some((url, driver)) = Driver::from_url(url) else {
        return Err(Error::DatabaseUrl(format!(
            "{}: the scheme must be sqlite:, postgres: or mysql: (e.g. sqlite://feed.db?mode=rwc)",
            redact(url)
        )));
    };
    // An SQLite URL names a file, whose name may hold a comma.
    let several = !driver.embedded() && several_hosts(&url);
    if several && !driver.several_hosts() {
        return Err(Error::DatabaseUrl(format!(
            "{}: on {} Feed takes one host per URL; put what follows the primary in \
             front of the cluster (a proxy, or a DNS name moved on failover) and give its address",
            redact(&url),
            driver.name()
        )));
    }
    if !driver.embedded()
        && !several
        && let Err(e) = url::Url::parse(&url)
    {
        return Err(Error::DatabaseUrl(format!(
            "{}: {e}; expected e.g. postgres://user:password@host:5432/db",
            redact(&url)
        )));
    }
    let rwc = driver.embedded() && query_value(&url, "mode").as_deref() == Some("rwc");
    Ok(Target {
        url,
        driver,
        create: rwc,
        existing_only: !create,
    })
}

/// Whether the URL names several hosts (`postgres://h1:5432,h2:5432/db`).
fn several_hosts(url: &str) -> bool {
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hosts.contains(',')
}

/// One login first (see `Driver::login`), bounded by the connect timeout,
/// its failure said as what it means.
async fn first_login(target: &Target, primary: bool) -> Result<()> {
    let url = target.url.as_str();
    let login = target.driver.login(url, primary);
    match tokio::time::timeout(CONNECT_TIMEOUT, login).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(unreachable_as(target, Unreachable::Standby(address(url)))),
        Ok(Err(e)) => Err(classify(&e, target)),
        Err(_) => Err(unreachable_as(
            target,
            Unreachable::TimedOut {
                addr: address(url),
                after: CONNECT_TIMEOUT,
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn several_hosts_are_seen_in_the_authority_only() {
        assert!(super::several_hosts(
            "postgres://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write"
        ));
        assert!(!super::several_hosts("postgres://u:p,w@h1:5432/db"));
        assert!(!super::several_hosts("postgres://h1/db?options=a,b"));
    }

    #[test]
    fn one_host_per_url_where_the_driver_follows_no_more() {
        let refused = target("mysql://root@h1:3306,h2:3306/test", true).err();
        assert!(refused.is_some_and(|e| {
            e.to_string()
                .contains("on MySQL/MariaDB Feed takes one host per URL")
        }));
        assert!(target("postgres://h1:5432,h2:5432/db", true).is_ok());
        let file = target("sqlite://feed,1.db?mode=rwc", true).map(|t| t.driver);
        assert_eq!(
            file.ok(),
            Some(Driver::Sqlite),
            "a comma in a file name is no host list"
        );
    }

    use super::*;

    #[test]
    fn sqlite_files_are_shown_absolute_and_network_urls_redacted() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            shown("sqlite://feed.db?mode=rwc"),
            format!("sqlite://{}/feed.db?mode=rwc", cwd.display())
        );
        assert_eq!(shown("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
        assert_eq!(
            shown("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
    }
}
