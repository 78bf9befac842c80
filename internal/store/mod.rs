//! All of Feed's SQL: connecting, plus one file per concern (sessions,
//! leases, dispatch, results, gates, producer operations, status).
//!
//! Nothing outside this module writes SQL. Dialect differences live in
//! [`dialect`].

mod dialect;
mod dispatch;
mod gates;
mod leases;
pub mod producer;
mod results;
mod sessions;
pub mod status;

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, QueryResult,
    Value,
};

use dialect::stmt;
pub use dialect::{is_transient, stmt as statement};
pub use dispatch::{Fence, MAX_BRANCHES, ReadyItem};
pub use gates::{GateCount, HeldPartition};
pub use leases::{FreeRow, HeldRow, LeaseCounts};
pub use producer::{Enqueued, NewItem, OnFailure, PartitionSpec, Retried, RetryScope};
pub use results::{Ack, ItemStatus, ItemWrite, Written, sanitize_error};

use crate::{Error, Result};

/// A connection pool plus the backend it talks to.
#[derive(Clone, Debug)]
pub struct Store {
    db: DatabaseConnection,
    backend: DbBackend,
    /// Statements issued through this store (all clones), exported as
    /// `feed_statements_total` so benchmarks can report statements per item.
    statements: Counter,
}

/// A database URL with its password replaced, safe for logs and errors.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => "<unparseable URL>".into(),
    }
}

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
            opts.map_sqlx_sqlite_opts(|o| {
                o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    // As on PostgreSQL and MySQL: an item must name an existing partition.
                    .foreign_keys(true)
            });
        }
        let db = Database::connect(opts).await.map_err(|e| Error::Connect {
            url: redact(&url),
            reason: e.to_string().replace(&url, &redact(&url)),
        })?;
        let backend = db.get_database_backend();
        Ok(Store {
            db,
            backend,
            statements: Counter::default(),
        })
    }

    /// Statements issued so far by this store and its clones (transactions
    /// count their statements), so benchmarks can report statements per item.
    pub fn statements(&self) -> u64 {
        self.statements.get()
    }

    /// The counter behind [`Store::statements`], to register as a metric.
    pub fn statement_counter(&self) -> Counter {
        self.statements.clone()
    }

    /// Counts into `counter` from now on (the processor's exported metric).
    pub fn set_statement_counter(&mut self, counter: Counter) {
        counter.inc_by(self.statements.get());
        self.statements = counter;
    }

    pub(crate) fn count(&self, n: u64) {
        self.statements.inc_by(n);
    }

    /// The backend this store talks to.
    pub fn backend(&self) -> DbBackend {
        self.backend
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
        let mut delay = Duration::from_millis(50);
        for attempt in 1.. {
            match migration::Migrator::up(&self.db, None).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 10 => {
                    tracing::debug!(error = %e, attempt, "migration raced another processor; retrying");
                    tokio::time::sleep(delay + Duration::from_millis(rand::random::<u64>() % 50))
                        .await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the loop returns")
    }

    async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64> {
        retry(|| async {
            self.count(1);
            self.db
                .execute_raw(stmt(self.backend, sql, values.clone()))
                .await
                .map(|r| r.rows_affected())
        })
        .await
    }

    async fn query(&self, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>> {
        retry(|| async {
            self.count(1);
            self.db
                .query_all_raw(stmt(self.backend, sql, values.clone()))
                .await
        })
        .await
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

/// Retries a statement on transient conflicts (serialization failures,
/// deadlocks, SQLite BUSY, dropped connections) with a short jittered backoff.
pub(crate) async fn retry<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbErr>>,
{
    let mut delay = Duration::from_millis(10);
    for attempt in 1u32.. {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 8 && is_transient(&e) => {
                tracing::debug!(error = %e, attempt, "transient database error; retrying");
                let jitter = Duration::from_millis(rand::random::<u64>() % 10);
                tokio::time::sleep(delay + jitter).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
    unreachable!("the loop returns")
}
