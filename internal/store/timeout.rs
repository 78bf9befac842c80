//! Time limits on database calls.
//!
//! A statement sent on a connection that the network silently dropped (a
//! partition, a failover to a new address, a firewall that forgot the flow)
//! never gets an answer nor an error, and neither does whatever awaits it.
//! So every attempt of a statement, acquiring its connection included, gets
//! `--statement-timeout`; one cut off fails as a transient error and is
//! retried on another connection, and the connection it was using is closed
//! instead of going back to the pool (see [`release_check`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use sea_orm::sqlx;

/// Default `--statement-timeout`: three times the default session expiry, so
/// a slow but healthy statement is not cut off, while a dead connection is
/// still given up in bounded time.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = crate::config::Config::STATEMENT_TIMEOUT;

/// The limit, and when it last cut a statement off (shared by a store's clones).
#[derive(Debug)]
pub(crate) struct Bound {
    /// Longest one attempt of a statement may take.
    pub(crate) limit: Duration,
    /// When an attempt was last cut off, so readiness can report it.
    last: Mutex<Option<Instant>>,
    /// When a statement was last refused because its connection's server
    /// takes no writes (see `role`).
    wrong_node: Mutex<Option<Instant>>,
    /// A sweep of the idle connections is under way (see `sweep`).
    pub(crate) sweeping: AtomicBool,
}

impl Bound {
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            limit,
            last: Mutex::new(None),
            wrong_node: Mutex::new(None),
            sweeping: AtomicBool::new(false),
        }
    }

    /// A statement was refused because its server takes no writes.
    pub(crate) fn wrong_node(&self) {
        *self.wrong_node.lock().expect("bound lock") = Some(Instant::now());
    }

    /// Whether a statement was refused so within the last `window`.
    pub(crate) fn wrong_node_within(&self, window: Duration) -> bool {
        self.wrong_node
            .lock()
            .expect("bound lock")
            .is_some_and(|t| t.elapsed() < window)
    }

    pub(crate) fn timed_out(&self) {
        *self.last.lock().expect("bound lock") = Some(Instant::now());
    }

    /// Whether an attempt was cut off within the last `window`.
    pub(crate) fn timed_out_within(&self, window: Duration) -> bool {
        self.last
            .lock()
            .expect("bound lock")
            .is_some_and(|t| t.elapsed() < window)
    }
}

/// What sqlx's pool hooks return.
pub(crate) type Hook<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// sqlx's `after_release` hook. When a connection goes back to the pool,
/// sqlx pings it (to flush whatever an interrupted statement left) with no
/// time limit (sqlx-core 0.9 `Floating::return_to_pool`): on a dead
/// connection that ping never ends and the connection keeps its pool slot
/// for good. So once an attempt has been cut off (within the last
/// statement timeout), a released connection is pinged here first, within
/// the limit, and sqlx closes one that does not answer (an `Err` here
/// means `close_hard`). A connection dies unseen only under a statement
/// that then gets no answer, and that statement is cut off, and marked so,
/// before its connection is released; otherwise the ping here would only
/// double sqlx's own (a round trip per statement). Over TLS the close
/// itself still waits for the peer (sqlx's TLS flush waits to read), so
/// there the slot comes back only when the socket fails.
pub(crate) fn release_check<'c, C: sqlx::Connection>(
    conn: &'c mut C,
    bound: &Bound,
) -> Hook<'c, bool> {
    let limit = bound.limit;
    let suspect = bound.timed_out_within(limit);
    Box::pin(async move {
        if !suspect {
            return Ok(true);
        }
        match tokio::time::timeout(limit, conn.ping()).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                tracing::debug!(
                    limit = ?limit,
                    "a released connection did not answer a ping; closing it"
                );
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to a ping within --statement-timeout",
                )))
            }
        }
    })
}

/// sqlx's `after_connect` hook on MySQL/MariaDB: a processor cut off in the
/// middle of a transaction (between its fenced UPDATE and the COMMIT)
/// leaves the server waiting on that transaction, and its row locks block
/// the processor taking the partitions over, until the server notices the
/// client is gone (hours, with default TCP keepalive). MariaDB ends such a
/// transaction after `idle_transaction_timeout`; Feed's transactions never
/// wait between statements, so one idle for longer than the statement
/// timeout has been given up by its client. MySQL has no such setting (the
/// statement is refused and the server's defaults stay).
pub(crate) fn end_idle_transactions(
    conn: &mut sqlx::MySqlConnection,
    limit: Duration,
) -> Hook<'_, ()> {
    let secs = limit.as_millis().div_ceil(1000).max(1);
    Box::pin(async move {
        let sql = format!("SET SESSION idle_transaction_timeout = {secs}");
        if let Err(e) = sqlx::Executor::execute(&mut *conn, sqlx::AssertSqlSafe(sql)).await {
            tracing::debug!(error = %e, "idle_transaction_timeout not set (MySQL has none)");
        }
        Ok(())
    })
}
