//! All of Feed's SQL: connecting, plus one file per concern (sessions,
//! leases, dispatch, results, gates, producer operations, status).
//!
//! Nothing outside this module writes SQL. What differs between databases
//! lives in `driver`, one file per database. Operator controls live in `controls`, the console's read
//! models in [`listing`], retention in [`prune`].

pub mod audit;
pub mod backlog;
mod batches;
mod citus;
mod connect;
mod connect_error;
mod controls;
mod dispatch;
pub mod driver;
mod ending;
mod enqueue;
pub mod events;
mod execute;
pub mod export;
mod gates;
mod hosts;
mod insert;
mod leases;
pub mod limits;
pub mod listing;
pub(crate) mod nodelay;
mod outbox;
pub mod overview;
mod pooler;
mod probes;
pub mod producer;
pub mod prune;
mod results;
mod returning;
mod role;
mod routing;
pub mod schedules;
mod schema;
pub mod scope;
mod sessions;
mod spawn;
mod statistics;
pub mod status;
mod sweep;
pub mod throughput;
mod timeout;
pub mod tokens;
mod unreadable;
pub mod wait;

#[cfg(test)]
mod conformance;

use driver::sql;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use sea_orm::{DatabaseConnection, DbBackend, DbErr, QueryResult};

pub use crate::schedule::Schedule;
pub use connect::{Options, shown};
pub use connect_error::{Unreachable, Unusable};
pub(crate) use dispatch::{Ask, Fence, ReadyItem};
pub(crate) use driver::Clocked;
pub use driver::Driver;
pub(crate) use driver::LEASE_CHUNK;
pub use driver::is_transient;
pub(crate) use gates::GateProbe;
pub(crate) use gates::HeldPartition;
pub(crate) use hosts::primary_url;
pub(crate) use leases::{HeldRow, LeaseCounts, STRANDED_SLICE};
pub use pooler::Pooler;
pub use producer::{Enqueued, NewItem, OnFailure, PartitionSpec, Retried, RetryScope};
pub(crate) use results::{Ack, ItemWrite, Written, sanitize_error};
pub use schedules::ScheduleRow;
pub use schema::SchemaError;
pub use scope::ProducerScope;
pub(crate) use sessions::Beat;
use timeout::Bound;
pub use timeout::DEFAULT_STATEMENT_TIMEOUT;

use crate::backoff::Backoff;
use crate::{Error, Result};

/// A connection pool plus the backend it talks to.
#[derive(Clone, Debug)]
pub struct Store {
    db: DatabaseConnection,
    /// The database and the clock its statements read.
    driver: Clocked,
    /// Statements issued through this store (all clones), exported as
    /// `feed_statements_total` so benchmarks can report statements per item.
    statements: Counter,
    /// The time limit on each statement attempt (`--statement-timeout`).
    bound: Arc<Bound>,
    /// Attempts cut off by that limit, exported as `feed_statement_timeouts_total`.
    timeouts: Counter,
    /// What stands between Feed and the database (`--db-pooler`).
    pooler: Pooler,
    /// The hosts of a multi-host PostgreSQL URL, followed after a failover.
    hosts: Option<Arc<hosts::Hosts>>,
    /// The last backlog count, reused while it is fresh.
    recent: Arc<backlog::Recent>,
}

/// The value of `key` in the URL's query.
pub(crate) fn query_value(url: &str, key: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// A URL (the database's, the handler's) with its password and secret
/// query values replaced, safe for logs and errors.
pub(crate) fn redact(url: &str) -> String {
    if let Some((one, list)) = hosts::one_host(url) {
        return hosts::put_back(&redact(&one), list);
    }
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
        *self.driver
    }

    /// The underlying sea-orm connection, for callers that need their own queries.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Applies the migrations. Concurrent callers on an empty database all
    /// succeed: the DDL is idempotent and a lost race on the migrations
    /// table is retried.
    /// A database whose migrations are all applied is only read, so
    /// commands that read also work on a standby. On Citus, what is left
    /// on the coordinator alone is distributed afterwards.
    pub async fn migrate(&self) -> Result<()> {
        let nodes = self.citus_nodes().await?;
        if !self.migrated().await {
            nodes.ready()?;
            self.migrate_pending().await?;
        }
        self.finish_distribution(nodes).await
    }

    async fn migrate_pending(&self) -> Result<()> {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        for attempt in 1.. {
            match self.migrate_once().await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 10 => {
                    tracing::debug!(error = %e, attempt, "migration raced another processor; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(self.explain(e.into())),
            }
        }
        unreachable!("the loop returns")
    }

    /// Whether every migration is applied (read without writing).
    async fn migrated(&self) -> bool {
        self.pending_migrations().await.is_ok_and(|n| n == 0)
    }

    /// One run of the migrations; behind a transaction pooler, all of them
    /// in one transaction (see `pooler`).
    async fn migrate_once(&self) -> std::result::Result<(), DbErr> {
        use migration::MigratorTrait;
        use sea_orm::TransactionTrait;
        if self.pooler != Pooler::Transaction {
            return migration::Migrator::up(&self.db, None).await;
        }
        let txn = self.db.begin().await?;
        migration::Migrator::up(&txn, None).await?;
        self.commit(txn).await
    }

    /// Whether processors on this database are woken by LISTEN/NOTIFY.
    pub(crate) fn listens(&self) -> bool {
        self.driver.dialect().notify.is_some() && self.pooler != Pooler::Transaction
    }

    /// The same store with its statements reading `clock` (tests move a
    /// [`Clock::movable`] instead of sleeping).
    pub fn with_clock(&self, clock: crate::config::Clock) -> Store {
        Store {
            driver: Clocked::new(*self.driver, clock),
            ..self.clone()
        }
    }

    /// The database clock, in epoch milliseconds.
    pub async fn now_ms(&self) -> Result<i64> {
        let rows = self.fetch(sql!(self.driver; "SELECT {now} AS now")).await?;
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
