//! All of Feed's SQL: connecting, sessions, leases, dispatch, results and gates.
//!
//! Nothing outside this module writes SQL. Dialect differences live in
//! [`dialect`]; producer operations (enqueue, status, retry) in [`producer`].
//! Operator controls live in `controls`, the console's read models in
//! [`listing`], retention in [`prune`].

mod controls;
mod dialect;
pub mod listing;
pub mod producer;
pub mod prune;
mod results;
pub mod status;

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, QueryResult,
    Value,
};

use dialect::{data_column, marks, stmt};
pub use dialect::{is_transient, stmt as statement};
pub use producer::{Enqueued, NewItem, OnFailure, PartitionSpec};
pub use results::Ack;

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

/// An item ready to be sent to the handler.
#[derive(Clone, Debug)]
pub struct ReadyItem {
    /// Item id.
    pub id: String,
    /// Its partition.
    pub partition_id: String,
    /// The item's gate, equal to its partition's gate when fetched.
    pub gate: i64,
    /// The bytes forwarded to the handler.
    pub data: Vec<u8>,
    /// Calls already made for the current step.
    pub attempts: i32,
    /// OCC version when fetched; the result is written only if it is unchanged.
    pub version: i64,
}

/// The new state of an item after a handler call, written under the fence.
#[derive(Clone, Debug)]
pub struct ItemWrite {
    /// `available`, `complete` or `failed`.
    pub status: &'static str,
    /// Next gate.
    pub gate: i64,
    /// New data; None keeps the stored bytes.
    pub data: Option<Vec<u8>>,
    /// Calls made for the current step.
    pub attempts: i32,
    /// Why the last call failed, if it did.
    pub last_error: Option<String>,
    /// Retry delay from now (database clock); None = may run at once.
    pub delay: Option<Duration>,
    /// A new step (or a final state) bumps `version`; a failed attempt does
    /// not, so the `Idempotency-Key` (id + version) is stable across retries
    /// of one step. Every write changes `version` or `attempts`, and both are
    /// checked, so a stale writer can never overwrite a newer result.
    pub new_step: bool,
}

/// A partition this processor holds, as read for a gate check.
#[derive(Clone, Debug)]
pub struct HeldPartition {
    /// Partition id.
    pub id: String,
    /// Current gate.
    pub gate: i64,
    /// OCC version.
    pub version: i64,
    /// Close when nothing is left.
    pub auto_close: bool,
    /// Never advance the gate automatically.
    pub manual_checkpoint: bool,
    /// `block` or `continue`.
    pub on_failure: String,
}

/// Count of items of one partition at one gate with one status.
#[derive(Clone, Debug)]
pub struct GateCount {
    /// Partition id.
    pub partition_id: String,
    /// Gate.
    pub gate: i64,
    /// Item status.
    pub status: String,
    /// Number of items.
    pub count: i64,
}

/// Session and partition counts for one balancing decision.
#[derive(Clone, Copy, Debug)]
pub struct LeaseCounts {
    /// Live sessions (heartbeat within the expiry).
    pub sessions: i64,
    /// Partitions with status `available`.
    pub active: i64,
    /// Of those, owned by this session.
    pub mine: i64,
    /// Available items in the partitions this session holds.
    pub backlog: i64,
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

    // ---- sessions ----

    /// Registers a session row for a starting processor.
    pub async fn register_session(&self, id: &str, hostname: &str, pid: u32) -> Result<()> {
        self.exec(
            "INSERT INTO feed_processors (id, hostname, pid, software_version, started_at, heartbeat_at) \
             VALUES (?, ?, ?, ?, {now}, {now})",
            vec![
                id.into(),
                hostname.into(),
                i64::from(pid).into(),
                env!("CARGO_PKG_VERSION").into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Heartbeats a session; false when the row is gone (the session was
    /// declared dead and every lease it had is lost).
    pub async fn heartbeat(&self, id: &str) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_processors SET heartbeat_at = {now} WHERE id = ?",
                vec![id.into()],
            )
            .await?;
        Ok(n == 1)
    }

    /// Deletes sessions silent for longer than `expiry`.
    pub async fn reap_sessions(&self, expiry: Duration) -> Result<u64> {
        self.exec(
            "DELETE FROM feed_processors WHERE heartbeat_at < {now} - ?",
            vec![ms(expiry).into()],
        )
        .await
    }

    /// Deletes a session row (graceful shutdown).
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        self.exec("DELETE FROM feed_processors WHERE id = ?", vec![id.into()])
            .await?;
        Ok(())
    }

    // ---- leases ----

    /// Live sessions, active partitions and this session's share, in one statement.
    pub async fn lease_counts(&self, me: &str, expiry: Duration) -> Result<LeaseCounts> {
        let rows = self
            .query(
                "SELECT \
                 (SELECT COUNT(*) FROM feed_processors WHERE heartbeat_at >= {now} - ?) AS sessions, \
                 (SELECT COUNT(*) FROM feed_partitions WHERE status = 'available') AS active, \
                 (SELECT COUNT(*) FROM feed_partitions WHERE status = 'available' AND owner = ?) AS mine, \
                 (SELECT COUNT(*) FROM feed_partitions p JOIN feed_items i ON i.partition_id = p.id \
                  WHERE p.owner = ? AND p.status = 'available' AND i.status = 'available') AS backlog",
                vec![ms(expiry).into(), me.into(), me.into()],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::NotFound("lease counts".into()))?;
        Ok(LeaseCounts {
            sessions: get(row, "sessions")?,
            active: get(row, "active")?,
            mine: get(row, "mine")?,
            backlog: get(row, "backlog")?,
        })
    }

    /// Up to `limit` active partitions whose owner is NULL or not a live session.
    pub async fn free_partitions(
        &self,
        expiry: Duration,
        limit: usize,
    ) -> Result<Vec<(String, i64)>> {
        let rows = self
            .query(
                "SELECT id, version FROM feed_partitions WHERE status = 'available' AND \
                 (owner IS NULL OR owner NOT IN \
                  (SELECT id FROM feed_processors WHERE heartbeat_at >= {now} - ?)) \
                 LIMIT ?",
                vec![ms(expiry).into(), (limit as i64).into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((get(r, "id")?, get(r, "version")?)))
            .collect()
    }

    /// Takes a partition by OCC: succeeds only if nobody changed it since it was read.
    pub async fn lease(&self, id: &str, version: i64, me: &str) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET owner = ?, version = version + 1, updated_at = {now} \
                 WHERE id = ? AND version = ? AND status = 'available'",
                vec![me.into(), id.into(), version.into()],
            )
            .await?;
        Ok(n == 1)
    }

    /// Active partitions owned by `me`, with their versions (a changed
    /// version means someone else wrote the partition: check its gate again).
    pub async fn held_partitions(&self, me: &str) -> Result<Vec<(String, i64)>> {
        let rows = self
            .query(
                "SELECT id, version FROM feed_partitions WHERE owner = ? AND status = 'available'",
                vec![me.into()],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((get(r, "id")?, get(r, "version")?)))
            .collect()
    }

    /// The live session holding the most active partitions, with its count.
    pub async fn most_loaded(&self, expiry: Duration) -> Result<Option<(String, i64)>> {
        let rows = self
            .query(
                "SELECT p.owner AS owner, COUNT(*) AS n FROM feed_partitions p \
                 JOIN feed_processors s ON s.id = p.owner \
                 WHERE p.status = 'available' AND s.heartbeat_at >= {now} - ? \
                 GROUP BY p.owner ORDER BY n DESC LIMIT 1",
                vec![ms(expiry).into()],
            )
            .await?;
        rows.first()
            .map(|r| Ok((get(r, "owner")?, get(r, "n")?)))
            .transpose()
    }

    /// Releases every partition owned by `me` so others can take them at once.
    pub async fn release_all(&self, me: &str) -> Result<u64> {
        self.exec(
            "UPDATE feed_partitions SET owner = NULL, version = version + 1, updated_at = {now} \
             WHERE owner = ?",
            vec![me.into()],
        )
        .await
    }

    // ---- dispatch ----

    /// One query for all held partitions: available items at their
    /// partition's gate whose `not_before` has passed, leaving out `skip`
    /// (the items already in flight here).
    pub async fn ready_items(
        &self,
        me: &str,
        limit: usize,
        skip: &[String],
    ) -> Result<Vec<ReadyItem>> {
        let not_in = if skip.is_empty() {
            String::new()
        } else {
            // Padded to a power of two by repeating an id, so that the
            // statement is prepared once per size class, not once per length.
            format!(" AND i.id NOT IN ({})", marks(results::bucket(skip.len())))
        };
        let sql = format!(
            "SELECT i.id, i.partition_id, i.gate, {data} AS data, i.attempts, i.version \
             FROM feed_partitions p JOIN feed_items i ON i.partition_id = p.id AND i.gate = p.gate \
             WHERE p.owner = ? AND p.status = 'available' AND i.status = 'available' AND NOT p.paused \
             AND (i.not_before IS NULL OR i.not_before <= {{now}}){not_in} LIMIT ?",
            data = data_column(self.backend, "i")
        );
        let mut values: Vec<Value> = vec![me.into()];
        values.extend(skip.iter().map(|s| Value::from(s.clone())));
        if let Some(first) = skip.first() {
            for _ in skip.len()..results::bucket(skip.len()) {
                values.push(first.clone().into());
            }
        }
        values.push((limit as i64).into());
        let rows = self.query(&sql, values).await?;
        rows.iter()
            .map(|r| {
                Ok(ReadyItem {
                    id: get(r, "id")?,
                    partition_id: get(r, "partition_id")?,
                    gate: get(r, "gate")?,
                    data: get(r, "data")?,
                    attempts: get(r, "attempts")?,
                    version: get(r, "version")?,
                })
            })
            .collect()
    }

    // ---- gates ----

    /// The held partitions among `ids`, for a gate check.
    pub async fn partitions_for_check(
        &self,
        me: &str,
        ids: &[String],
    ) -> Result<Vec<HeldPartition>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!(
            "SELECT id, gate, version, auto_close, manual_checkpoint, on_failure FROM feed_partitions \
             WHERE owner = ? AND status = 'available' AND id IN ({})",
            marks(ids.len())
        );
        let mut values: Vec<Value> = vec![me.into()];
        values.extend(ids.iter().map(|i| Value::from(i.clone())));
        let rows = self.query(&sql, values).await?;
        rows.iter()
            .map(|r| {
                Ok(HeldPartition {
                    id: get(r, "id")?,
                    gate: get(r, "gate")?,
                    version: get(r, "version")?,
                    auto_close: get(r, "auto_close")?,
                    manual_checkpoint: get(r, "manual_checkpoint")?,
                    on_failure: get(r, "on_failure")?,
                })
            })
            .collect()
    }

    /// Counts of unfinished items (available or failed) by partition, gate
    /// and status, for many partitions in one statement.
    pub async fn unfinished_counts(&self, ids: &[String]) -> Result<Vec<GateCount>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let sql = format!(
            "SELECT partition_id, gate, status, COUNT(*) AS n FROM feed_items \
             WHERE partition_id IN ({}) AND status <> 'complete' \
             GROUP BY partition_id, gate, status",
            marks(ids.len())
        );
        let rows = self
            .query(&sql, ids.iter().map(|i| Value::from(i.clone())).collect())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(GateCount {
                    partition_id: get(r, "partition_id")?,
                    gate: get(r, "gate")?,
                    status: get(r, "status")?,
                    count: get(r, "n")?,
                })
            })
            .collect()
    }

    /// Moves a held partition to `gate` (OCC, owner-fenced).
    pub async fn advance_gate(&self, p: &HeldPartition, me: &str, gate: i64) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET gate = ?, version = version + 1, updated_at = {now} \
                 WHERE id = ? AND version = ? AND owner = ?",
                vec![
                    gate.into(),
                    p.id.clone().into(),
                    p.version.into(),
                    me.into(),
                ],
            )
            .await?;
        Ok(n == 1)
    }

    /// Closes (`complete`) or fails a held partition and releases it (OCC, owner-fenced).
    pub async fn finish_partition(
        &self,
        p: &HeldPartition,
        me: &str,
        status: &'static str,
    ) -> Result<bool> {
        let n = self
            .exec(
                "UPDATE feed_partitions SET status = ?, owner = NULL, version = version + 1, \
                 updated_at = {now} WHERE id = ? AND version = ? AND owner = ?",
                vec![
                    status.into(),
                    p.id.clone().into(),
                    p.version.into(),
                    me.into(),
                ],
            )
            .await?;
        Ok(n == 1)
    }

    /// Fails items whose status Feed cannot act on in a held partition:
    /// available below the partition's gate (they could never run) or an
    /// unknown status. Each gets a `last_error` that says what to do.
    pub async fn fail_unrunnable(&self, p: &HeldPartition, me: &str) -> Result<u64> {
        let below = format!(
            "item gate is below its partition's gate {}; it can never run. \
             Set its gate to {} or higher and run `processor retry`",
            p.gate, p.gate
        );
        let owned = "EXISTS (SELECT 1 FROM feed_partitions p WHERE p.id = ? AND p.owner = ?)";
        let n = self
            .exec(
                &format!(
                    "UPDATE feed_items SET status = 'failed', last_error = ?, version = version + 1, \
                     updated_at = {{now}} WHERE partition_id = ? AND status = 'available' AND gate < ? AND {owned}"
                ),
                vec![
                    below.into(),
                    p.id.clone().into(),
                    p.gate.into(),
                    p.id.clone().into(),
                    me.into(),
                ],
            )
            .await?;
        let m = self
            .exec(
                &format!(
                    "UPDATE feed_items SET last_error = {}, status = 'failed', version = version + 1, \
                     updated_at = {{now}} WHERE partition_id = ? \
                     AND status NOT IN ('available', 'complete', 'failed') AND {owned}",
                    unknown_status_message(self.backend)
                ),
                vec![p.id.clone().into(), p.id.clone().into(), me.into()],
            )
            .await?;
        Ok(n + m)
    }
}

/// `last_error` for an item with a status Feed does not know, naming it.
fn unknown_status_message(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::MySql => {
            "CONCAT('unknown status ''', status, '''; use available, complete or failed, then run `processor retry`')"
        }
        _ => {
            "'unknown status ''' || status || '''; use available, complete or failed, then run `processor retry`'"
        }
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
