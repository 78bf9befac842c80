//! All of Feed's SQL: connecting, plus one file per concern (sessions,
//! leases, dispatch, results, gates, producer operations, status).
//!
//! Nothing outside this module writes SQL. What differs between databases
//! lives in `driver`, one file per database. Operator controls live in `controls`, the console's read
//! models in [`listing`], retention in [`prune`].

mod controls;
mod dispatch;
pub mod driver;
pub mod events;
pub mod export;
mod gates;
mod insert;
mod leases;
pub mod limits;
pub mod listing;
pub(crate) mod nodelay;
pub mod overview;
pub mod producer;
pub mod prune;
mod results;
mod sessions;
pub mod status;
mod timeout;
pub mod tokens;
pub mod wait;

#[cfg(test)]
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, QueryResult,
    Value,
};

pub(crate) use dispatch::{Ask, Fence, ReadyItem};
pub use driver::Driver;
pub(crate) use driver::is_transient;
pub(crate) use gates::GateProbe;
pub(crate) use gates::HeldPartition;
pub(crate) use leases::{HeldRow, LEASE_CHUNK, LeaseCounts, STRANDED_SLICE};
pub use producer::{Enqueued, NewItem, OnFailure, PartitionSpec, Retried, RetryScope};
pub(crate) use results::{Ack, ItemWrite, Written, sanitize_error};
use timeout::Bound;
pub use timeout::DEFAULT_STATEMENT_TIMEOUT;
pub use tokens::ProducerScope;

use crate::backoff::Backoff;
use crate::{Error, Result};

/// Builds a statement for `backend` from SQL written with `?` placeholders
/// and `{now}` for the database clock, as every store operation does.
pub fn statement(backend: DbBackend, sql: &str, values: Vec<Value>) -> sea_orm::Statement {
    match Driver::of(backend) {
        Some(driver) => driver.stmt(sql, values),
        None => sea_orm::Statement::from_sql_and_values(backend, sql, values),
    }
}

/// A connection pool plus the backend it talks to.
#[derive(Clone, Debug)]
pub struct Store {
    db: DatabaseConnection,
    driver: Driver,
    /// Statements issued through this store (all clones), exported as
    /// `feed_statements_total` so benchmarks can report statements per item.
    statements: Counter,
    /// The time limit on each statement attempt (`--statement-timeout`).
    bound: Arc<Bound>,
    /// Attempts cut off by that limit, exported as `feed_statement_timeouts_total`.
    timeouts: Counter,
}

/// A URL (the database's, the handler's) with its password and secret
/// query values replaced, safe for logs and errors.
pub(crate) fn redact(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return "<unparseable URL>".into();
    };
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let secret = SECRET_KEYS
                    .iter()
                    .any(|s| k.to_ascii_lowercase().contains(s));
                let v = if secret { "***".into() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// Query parameters whose names contain one of these are hidden by
/// [`redact`]: `password=`, `api_key=`, `token=`, `sig=`…
const SECRET_KEYS: [&str; 7] = ["pass", "secret", "token", "key", "sig", "auth", "cred"];

fn get<T: sea_orm::TryGetable>(row: &QueryResult, col: &str) -> Result<T> {
    Ok(row.try_get::<T>("", col)?)
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
        Self::connect_with(url, max_connections, DEFAULT_STATEMENT_TIMEOUT).await
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
        let scheme = url.split(':').next().unwrap_or_default();
        let url = match scheme {
            "sqlite" | "postgres" | "postgresql" | "mysql" => url.to_string(),
            "mariadb" => url.replacen("mariadb", "mysql", 1),
            _ => {
                return Err(Error::DatabaseUrl(format!(
                    "{}: the scheme must be sqlite:, postgres: or mysql: (e.g. sqlite://feed.db?mode=rwc)",
                    redact(url)
                )));
            }
        };
        if scheme != "sqlite"
            && let Err(e) = url::Url::parse(&url)
        {
            return Err(Error::DatabaseUrl(format!(
                "{}: {e}; expected e.g. postgres://user:password@host:5432/db",
                redact(&url)
            )));
        }
        let mut opts = ConnectOptions::new(url.clone());
        opts.max_connections(max_connections.max(2))
            .min_connections(1)
            .connect_timeout(Duration::from_secs(10))
            .acquire_timeout(Duration::from_secs(5))
            .set_application_name("feed-processor")
            .sqlx_logging(false);
        if scheme == "sqlite" {
            // No network between Feed and the file: a connection cannot die
            // in the pool, and a ping is a hop to its worker thread and back.
            opts.map_sqlx_sqlite_opts(driver::sqlite::connect_options)
                .test_before_acquire(false);
        }
        let bound = Arc::new(Bound::new(statement_timeout));
        let limit = statement_timeout;
        let released = bound.clone();
        opts.map_sqlx_postgres_pool_opts(move |o| {
            let released = released.clone();
            o.after_release(move |conn, _| timeout::release_check(conn, &released))
                .after_connect(|_, _| {
                    nodelay::set_on_open_sockets();
                    Box::pin(async { Ok(()) })
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
        let db = Database::connect(opts).await.map_err(|e| Error::Connect {
            url: redact(&url),
            reason: e.to_string().replace(&url, &redact(&url)),
        })?;
        let backend = db.get_database_backend();
        let driver = Driver::of(backend).ok_or_else(|| {
            Error::DatabaseUrl(format!(
                "{}: Feed does not run on {backend:?}",
                redact(&url)
            ))
        })?;
        Ok(Store {
            db,
            driver,
            statements: Counter::default(),
            bound,
            timeouts: Counter::default(),
        })
    }

    /// Counts into `counter` from now on (the processor's exported metric).
    pub(crate) fn set_statement_counter(&mut self, counter: Counter) {
        counter.inc_by(self.statements.get());
        self.statements = counter;
    }

    /// Counts statement timeouts into `counter` from now on (the processor's exported metric).
    pub(crate) fn set_timeout_counter(&mut self, counter: Counter) {
        counter.inc_by(self.timeouts.get());
        self.timeouts = counter;
    }

    /// Whether a statement attempt was cut off by the time limit within the
    /// last `window` (readiness reports it).
    pub(crate) fn timed_out_within(&self, window: Duration) -> bool {
        self.bound.timed_out_within(window)
    }

    pub(crate) fn count(&self, n: u64) {
        self.statements.inc_by(n);
    }

    /// The backend this store talks to.
    pub fn backend(&self) -> DbBackend {
        self.driver.backend()
    }

    /// The driver of the database this store talks to.
    pub fn driver(&self) -> Driver {
        self.driver
    }

    /// The underlying sea-orm connection, for callers that need their own queries.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Applies the migrations. Concurrent callers on an empty database all
    /// succeed: the DDL is idempotent and a lost race on the migrations
    /// table is retried.
    pub async fn migrate(&self) -> Result<()> {
        use migration::MigratorTrait;
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        for attempt in 1.. {
            match migration::Migrator::up(&self.db, None).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 10 => {
                    tracing::debug!(error = %e, attempt, "migration raced another processor; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the loop returns")
    }

    async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64> {
        self.retry(|| async {
            self.count(1);
            self.db
                .execute_raw(self.driver.stmt(sql, values.clone()))
                .await
                .map(|r| r.rows_affected())
        })
        .await
    }

    async fn query(&self, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>> {
        self.retry(|| async {
            self.count(1);
            self.db
                .query_all_raw(self.driver.stmt(sql, values.clone()))
                .await
        })
        .await
    }

    /// Whether processors on this database are woken by LISTEN/NOTIFY.
    pub(crate) fn listens(&self) -> bool {
        self.driver.notify().is_some()
    }

    /// The database clock, in epoch milliseconds.
    pub async fn now_ms(&self) -> Result<i64> {
        let rows = self.query("SELECT {now} AS now", vec![]).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::NotFound("clock".into()))?;
        get(row, "now")
    }
}

/// A duration as integer milliseconds for SQL arithmetic.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    /// Runs `op` (one statement, or one transaction) and retries it on
    /// transient conflicts (serialization failures, deadlocks, SQLite BUSY,
    /// dropped connections) with a short jittered backoff. Each attempt is
    /// cut off after the statement timeout; an attempt cut off is retried
    /// once more (its connection is closed, the next one is fresh), then the
    /// call fails with [`Error::StatementTimeout`].
    pub(crate) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, DbErr>>,
    {
        let limit = self.bound.limit;
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        let mut cut = 0;
        for attempt in 1u32.. {
            // Pinned here, the attempt (and its connection) is dropped
            // only after a cut-off is recorded: see `release_check`.
            let call = std::pin::pin!(op());
            match tokio::time::timeout(limit, call).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if attempt < 8 && is_transient(&e) => {
                    tracing::debug!(error = %e, attempt, "transient database error; retrying");
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => {
                    let e = self.cut_off(limit);
                    cut += 1;
                    let retrying = cut < 2 && attempt < 8;
                    tracing::warn!(limit = ?limit, attempt, retrying, "database statement got no answer within the statement timeout");
                    if !retrying {
                        return Err(e);
                    }
                }
            }
            backoff.wait().await;
        }
        unreachable!("the loop returns")
    }

    /// Bounds one database call that does not go through `Store::retry`
    /// (a transaction's `begin`, statements or `commit`) by the statement
    /// timeout, so that a dead connection fails it instead of hanging.
    pub async fn bounded<T, E>(
        &self,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T>
    where
        Error: From<E>,
    {
        self.within(self.bound.limit, call).await
    }

    /// Like [`Store::bounded`] with a tighter limit, for a call whose answer
    /// is worthless after it (a heartbeat later than the session expiry).
    pub(crate) async fn within<T, E>(
        &self,
        limit: Duration,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T>
    where
        Error: From<E>,
    {
        // The call is dropped after a cut-off is recorded (see `retry`).
        let call = std::pin::pin!(call);
        match tokio::time::timeout(limit, call).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(self.cut_off(limit)),
        }
    }

    /// Records an attempt cut off after `limit`; the error to report.
    fn cut_off(&self, limit: Duration) -> Error {
        self.bound.timed_out();
        self.timeouts.inc();
        Error::StatementTimeout(limit)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_passwords_and_secret_query_values() {
        assert_eq!(
            super::redact("https://u:pw@h/feed?api_key=k1&mode=fast&sig=s"),
            "https://u:***@h/feed?api_key=***&mode=fast&sig=***"
        );
        assert_eq!(
            super::redact("sqlite://feed.db?mode=rwc"),
            "sqlite://feed.db?mode=rwc"
        );
    }
}
