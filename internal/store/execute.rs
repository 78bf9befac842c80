//! Running statements: each retried on transient errors and bounded by
//! the statement timeout, transactions begun for writing, and a final
//! error said as what it means (a wrong node, a transaction pooler).

use std::time::Duration;

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbErr, IsolationLevel, QueryResult,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

use super::{Pooler, Store, driver, hosts, is_transient};
use crate::backoff::Backoff;
use crate::{Error, Result};

impl Store {
    /// Runs a built statement (retried as [`Store::retry`] does); the
    /// rows it changed.
    pub(super) async fn run(&self, st: sea_orm::Statement) -> Result<u64> {
        self.retry(|| async {
            self.count(1);
            self.execute_raw(st.clone())
                .await
                .map(|r| r.rows_affected())
        })
        .await
    }

    /// Runs a built query (retried as [`Store::retry`] does); its rows.
    pub(super) async fn fetch(&self, st: sea_orm::Statement) -> Result<Vec<QueryResult>> {
        self.retry(|| async {
            self.count(1);
            self.query_all_raw(st.clone()).await
        })
        .await
    }

    /// [`Store::fetch`] for a large read whose shape stays from call to
    /// call (the dispatch read): PostgreSQL would plan it anew on every
    /// call (a custom plan, milliseconds for a hundred branches), so it
    /// runs in a transaction that asks for the plan prepared once per
    /// connection. Behind a transaction pooler nothing is prepared to keep.
    pub(super) async fn fetch_planned_once(
        &self,
        st: sea_orm::Statement,
    ) -> Result<Vec<QueryResult>> {
        let Some(plan_once) = self.driver.dialect().plan_once else {
            return self.fetch(st).await;
        };
        if self.pooler == Pooler::Transaction {
            return self.fetch(st).await;
        }
        self.retry(|| async {
            self.count(1);
            let txn = self.db.begin().await?;
            txn.execute_unprepared(plan_once).await?;
            let rows = txn.query_all_raw(st.clone()).await?;
            txn.commit().await?;
            Ok(rows)
        })
        .await
    }

    pub(super) async fn begin_write(&self) -> Result<DatabaseTransaction> {
        self.bounded(self.begin_immediate()).await
    }

    /// Begins a transaction that writes: on SQLite it takes the write lock
    /// at once, so two of them never both read and then fail to upgrade.
    pub(super) async fn begin_immediate(
        &self,
    ) -> std::result::Result<DatabaseTransaction, sea_orm::DbErr> {
        self.begin_at(None).await
    }

    /// [`Store::begin_immediate`] at `isolation` (None: the server's default).
    pub(super) async fn begin_at(
        &self,
        isolation: Option<IsolationLevel>,
    ) -> std::result::Result<DatabaseTransaction, sea_orm::DbErr> {
        let opts = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            isolation_level: isolation,
            ..Default::default()
        };
        self.connection().begin_with_options(opts).await
    }

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
            let call = hosts::watched(self.hosts.as_ref(), call);
            match tokio::time::timeout(limit, call).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if attempt < 8 && is_transient(&e) => {
                    if driver::is_wrong_node(&e) {
                        self.bound.wrong_node();
                    }
                    self.host_fault(&e);
                    tracing::debug!(error = %e, attempt, "transient database error; retrying");
                }
                Ok(Err(e)) => return Err(self.explain(e.into())),
                Err(_) => {
                    let e = self.cut_off(limit);
                    cut += 1;
                    let retrying = cut < 2 && attempt < 8;
                    static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
                    if let Some(n) = LOG.due() {
                        tracing::warn!(limit = ?limit, attempt, retrying, cut_off = n, "database statement got no answer within the statement timeout");
                    }
                    if !retrying {
                        return Err(self.explain(e));
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
        let call = hosts::watched(self.hosts.as_ref(), call);
        match tokio::time::timeout(limit, call).await {
            Ok(r) => r.map_err(|e| {
                let e = Error::from(e);
                if let Error::Db(d) = &e {
                    self.host_fault(d);
                }
                e
            }),
            Err(_) => Err(self.explain(self.cut_off(limit))),
        }
    }

    /// Records an attempt cut off after `limit`; the error to report.
    /// A statement's final error, said as what it means: while connections
    /// are refused or fail because the server takes no writes, a timeout or
    /// a pool that could not connect is that, not a silent database.
    pub(super) fn explain(&self, e: Error) -> Error {
        if let Error::Db(d) = &e {
            self.host_fault(d);
        }
        if let Error::Db(d) = &e
            && self.pooler != Pooler::Transaction
            && driver::is_lost_statement(d)
        {
            return Error::TransactionPooler(d.to_string());
        }
        let wrong = match &e {
            Error::StatementTimeout(_) | Error::Db(DbErr::ConnectionAcquire(_)) => {
                self.bound.wrong_node_within(self.bound.limit)
            }
            Error::Db(d) => driver::is_wrong_node(d),
            _ => false,
        };
        if wrong {
            self.bound.wrong_node();
            return Error::WrongNode;
        }
        e
    }

    /// A multi-host store asks its hosts again when `e` may mean its host
    /// is gone or no longer the primary.
    fn host_fault(&self, e: &DbErr) {
        if let Some(h) = &self.hosts
            && hosts::host_fault(e)
        {
            h.suspect();
        }
    }

    fn cut_off(&self, limit: Duration) -> Error {
        if let Some(h) = &self.hosts {
            h.suspect();
        }
        self.bound.timed_out();
        self.sweep_idle();
        self.timeouts.inc();
        Error::StatementTimeout(limit)
    }
}
