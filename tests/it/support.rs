//! Test support: a fresh database per test on each backend, a real HTTP
//! handler with a ledger, and Feed either in this process or as the real
//! `processor` binary, built on the shared test kit (`testkit/`).

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use feed::Config;
use sea_orm::{ConnectionTrait, QueryResult, Statement, TryGetableMany};
pub use testkit::{
    Backend, Call, Handler, Reserved, free_port, json, metric, signed, signed_event,
};
use testkit::{Database, Node, Process, Scene};

/// A uniquely named database, dropped when the test ends.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub store: feed::Store,
    /// The database, dropped at the end (None for an alias).
    owned: Option<Database>,
    /// On Citus, the test's place among those the cluster serves at once
    /// (held until the database is dropped).
    _turn: Option<tokio::sync::SemaphorePermit<'static>>,
}

/// Citus tests running at once. The cluster's four nodes share the
/// machine's cores with everything else: six end-to-end tests on it at
/// once held heartbeats past the session expiry, and a processor whose
/// session lapses delivers its items again (at least once, as designed).
static CITUS_TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(3);

impl TestDb {
    /// A fresh, migrated database; None (skip) when the server is unreachable
    /// outside CI. In CI an unreachable server fails the test.
    pub async fn new(backend: Backend) -> Option<TestDb> {
        let turn = Self::turn(backend).await;
        let db = Database::fresh_migrated(backend, "feed_t_", 4).await?;
        Some(Self::owning(backend, db, turn))
    }

    /// A fresh database without Feed's tables.
    pub async fn empty(backend: Backend) -> Option<TestDb> {
        let turn = Self::turn(backend).await;
        let db = Database::fresh(backend, "feed_t_", 4).await?;
        Some(Self::owning(backend, db, turn))
    }

    /// Waits for a place among the Citus tests (none elsewhere).
    async fn turn(backend: Backend) -> Option<tokio::sync::SemaphorePermit<'static>> {
        match backend {
            Backend::Citus => Some(CITUS_TURNS.acquire().await.expect("never closed")),
            _ => None,
        }
    }

    fn owning(
        backend: Backend,
        db: Database,
        turn: Option<tokio::sync::SemaphorePermit<'static>>,
    ) -> TestDb {
        TestDb {
            backend,
            url: db.url.clone(),
            store: db.store.clone(),
            owned: Some(db),
            _turn: turn,
        }
    }

    /// Another handle on the same database under a different URL (e.g.
    /// with a password); dropping it does not drop the database.
    pub fn alias(db: &TestDb, url: &str) -> TestDb {
        TestDb {
            backend: db.backend,
            url: url.to_string(),
            store: db.store.clone(),
            owned: None,
            _turn: None,
        }
    }

    /// Runs SQL written with `?` placeholders (numbered for PostgreSQL).
    pub async fn exec(&self, sql: &str, values: Vec<sea_orm::Value>) -> u64 {
        self.store
            .connection()
            .execute_raw(self.stmt(sql, values))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .rows_affected()
    }

    /// Runs a change made by hand beside running processors: a deadlock or
    /// another conflict the database asks to retry is tried again, as an
    /// operator would.
    pub async fn by_hand(&self, sql: &str, values: Vec<sea_orm::Value>) -> u64 {
        self.retried(sql, values, feed::store::is_transient).await
    }

    /// Runs `sql`, trying it again (ten times at most, each a little
    /// later) while `again` says its error will pass.
    pub async fn retried(
        &self,
        sql: &str,
        values: Vec<sea_orm::Value>,
        again: impl Fn(&sea_orm::DbErr) -> bool,
    ) -> u64 {
        let mut tries = 0;
        loop {
            let run = self
                .store
                .connection()
                .execute_raw(self.stmt(sql, values.clone()));
            match run.await {
                Ok(r) => return r.rows_affected(),
                Err(e) if tries < 10 && again(&e) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50 * tries)).await;
                }
                Err(e) => panic!("{sql}: {e}"),
            }
        }
    }

    /// Runs SQL that takes no values.
    pub async fn sql(&self, sql: &str) -> u64 {
        self.exec(sql, vec![]).await
    }

    pub async fn query(&self, sql: &str, values: Vec<sea_orm::Value>) -> Vec<QueryResult> {
        self.store
            .connection()
            .query_all_raw(self.stmt(sql, values))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The `n` column of a one-row query.
    pub async fn count(&self, sql: &str) -> i64 {
        self.query(sql, vec![]).await[0].try_get("", "n").unwrap()
    }

    /// The rows of `sql`, each as the tuple of the columns `cols`.
    pub async fn rows<T: TryGetableMany>(&self, sql: &str, cols: &[&str]) -> Vec<T> {
        let cols: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
        self.query(sql, vec![])
            .await
            .iter()
            .map(|r| r.try_get_many("", &cols).unwrap())
            .collect()
    }

    fn stmt(&self, sql: &str, values: Vec<sea_orm::Value>) -> Statement {
        testkit::statement(self.store.driver(), sql, values)
    }

    /// Creates a partition with plain SQL.
    pub async fn partition(&self, id: &str, auto_close: bool, manual: bool, on_failure: &str) {
        self.exec(
            "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure) VALUES (?, ?, ?, ?)",
            vec![id.into(), auto_close.into(), manual.into(), on_failure.into()],
        )
        .await;
    }

    /// Creates a partition with plain SQL, holding `items` (empty data at
    /// gate 0), in one transaction: a running processor could otherwise
    /// close the partition empty before its items arrive.
    pub async fn partition_of<S: AsRef<str>>(
        &self,
        id: &str,
        auto_close: bool,
        manual: bool,
        on_failure: &str,
        items: &[S],
    ) {
        use sea_orm::TransactionTrait;
        let txn = self.store.connection().begin().await.unwrap();
        txn.execute_raw(self.stmt(
            "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure) VALUES (?, ?, ?, ?)",
            vec![id.into(), auto_close.into(), manual.into(), on_failure.into()],
        ))
        .await
        .unwrap();
        for item in items {
            txn.execute_raw(self.stmt(
                "INSERT INTO feed_items (id, partition_id, gate, data) VALUES (?, ?, 0, ?)",
                vec![item.as_ref().into(), id.into(), b"{}".to_vec().into()],
            ))
            .await
            .unwrap();
        }
        txn.commit().await.unwrap();
    }

    /// Adds an item with plain SQL.
    pub async fn item(&self, id: &str, partition: &str, gate: i64, data: serde_json::Value) {
        self.exec(
            "INSERT INTO feed_items (id, partition_id, gate, data) VALUES (?, ?, ?, ?)",
            vec![
                id.into(),
                partition.into(),
                gate.into(),
                serde_json::to_vec(&data).unwrap().into(),
            ],
        )
        .await;
    }

    pub async fn item_row(&self, id: &str) -> ItemRow {
        let sql = if self.backend == Backend::Sqlite {
            "SELECT status, gate, attempts, last_error, CAST(data AS BLOB) AS data, version, not_before FROM feed_items WHERE id = ?"
        } else {
            "SELECT status, gate, attempts, last_error, data, version, not_before FROM feed_items WHERE id = ?"
        };
        let rows = self.query(sql, vec![id.into()]).await;
        let r = rows.first().unwrap_or_else(|| panic!("no item {id}"));
        let data: Vec<u8> = r.try_get("", "data").unwrap();
        ItemRow {
            id: id.to_string(),
            status: r.try_get("", "status").unwrap(),
            gate: r.try_get("", "gate").unwrap(),
            attempts: r.try_get("", "attempts").unwrap(),
            last_error: r.try_get("", "last_error").unwrap(),
            data: serde_json::from_slice(&data).unwrap_or(serde_json::Value::Null),
            version: r.try_get("", "version").unwrap(),
            not_before: r.try_get("", "not_before").unwrap(),
        }
    }

    /// The rows of the items `ids`, in that order.
    pub async fn item_rows<S: AsRef<str>>(&self, ids: &[S]) -> Vec<ItemRow> {
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            rows.push(self.item_row(id.as_ref()).await);
        }
        rows
    }

    /// Asserts that item `id` failed after `attempts` attempts with a
    /// `last_error` that says each of `says`; returns its row.
    pub async fn assert_failed(&self, id: &str, attempts: i32, says: &[&str]) -> ItemRow {
        let row = self.item_row(id).await;
        assert_eq!(
            (row.status.as_str(), row.attempts),
            ("failed", attempts),
            "{id}"
        );
        let err = row.last_error.as_deref().unwrap_or_default();
        for text in says {
            assert!(err.contains(text), "{id}: {err:.300}");
        }
        row
    }

    /// (status, gate, owner) of a partition.
    pub async fn partition_row(&self, id: &str) -> (String, i64, Option<String>) {
        let rows = self
            .query(
                "SELECT status, gate, owner FROM feed_partitions WHERE id = ?",
                vec![id.into()],
            )
            .await;
        let r = rows.first().unwrap_or_else(|| panic!("no partition {id}"));
        (
            r.try_get("", "status").unwrap(),
            r.try_get("", "gate").unwrap(),
            r.try_get("", "owner").unwrap(),
        )
    }

    /// Ids of the live processor sessions.
    pub async fn sessions(&self) -> Vec<String> {
        self.query("SELECT id FROM feed_processors", vec![])
            .await
            .iter()
            .map(|r| r.try_get("", "id").unwrap())
            .collect()
    }

    pub async fn partition_status(&self, id: &str) -> String {
        self.partition_row(id).await.0
    }

    /// Adds items with empty data at `gate`.
    pub async fn items<S: AsRef<str>>(&self, partition: &str, gate: i64, ids: &[S]) {
        for id in ids {
            self.item(id.as_ref(), partition, gate, serde_json::json!({}))
                .await;
        }
    }

    /// Waits until `items` items are complete (two minutes at most).
    pub async fn wait_complete(&self, items: i64) {
        wait_for("the drain", Duration::from_secs(120), || async {
            self.count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'")
                .await
                == items
        })
        .await;
    }

    /// Waits (up to 30 seconds) until item `id` has `status`.
    pub async fn wait_item(&self, id: &str, status: &str) {
        wait_for(
            &format!("item {id} {status}"),
            Duration::from_secs(30),
            || async { self.item_row(id).await.status == status },
        )
        .await;
    }

    /// Waits (up to a minute) until partition `id` has `status`.
    pub async fn wait_partition(&self, id: &str, status: &str) {
        wait_for(
            &format!("partition {id} {status}"),
            Duration::from_secs(60),
            || async { self.partition_status(id).await == status },
        )
        .await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(db) = &self.owned {
            db.drop_blocking();
        }
    }
}

/// Ids `{prefix}0` to `{prefix}{n - 1}`.
pub fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[derive(Debug, Clone)]
pub struct ItemRow {
    pub id: String,
    pub status: String,
    pub gate: i64,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub data: serde_json::Value,
    pub version: i64,
    pub not_before: Option<i64>,
}

/// A running `processor run`, killed when dropped (the kit's
/// [`Process`], with the listen address as tests read it).
pub struct Proc {
    process: Process,
    pub listen: Option<String>,
}

impl Deref for Proc {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

impl DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// Fast settings so the tests run in seconds.
pub const FAST: &[&str] = &[
    "--poll-interval",
    "50ms",
    "--heartbeat-interval",
    "200ms",
    "--session-expiry",
    "2s",
    "--acquire-interval",
    "200ms",
    "--backoff-base",
    "50ms",
    "--backoff-max",
    "200ms",
    "--request-timeout",
    "5s",
    "--drain-timeout",
    "5s",
];

impl Proc {
    /// Starts `processor run` with FAST settings plus `extra` (a flag of
    /// FAST that `extra` names takes `extra`'s value).
    pub fn start(db: &TestDb, handler_url: &str, extra: &[&str]) -> Proc {
        Self::start_with_env(db, handler_url, extra, &[])
    }

    /// [`Proc::start`] with the variables `env` set.
    pub fn start_with_env(
        db: &TestDb,
        handler_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let fast = FAST
            .chunks(2)
            .filter(|pair| !extra.contains(&pair[0]))
            .flatten();
        let args: Vec<&str> = fast.chain(extra).copied().collect();
        let process = Process::spawn_with_env(
            env!("CARGO_BIN_EXE_processor"),
            &db.url,
            handler_url,
            &args,
            Some("info,feed=debug,sqlx=warn"),
            env,
        )
        .expect("spawn processor");
        Proc {
            listen: Some(process.listen.clone()),
            process,
        }
    }

    /// `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.process.metrics(&reqwest::Client::new()).await
    }
}

/// The text of a console page at `url`, asked for as a browser on this
/// machine asks (the console answers only its own host names).
pub async fn page(url: &str) -> String {
    reqwest::Client::new()
        .get(url)
        .header("host", "127.0.0.1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The answer that finishes an item.
pub fn done() -> Response {
    json(200, serde_json::json!({"done": true}))
}

/// An error answer that asks not to be retried.
pub fn no_retry(status: u16, message: &str) -> Response {
    json(
        status,
        serde_json::json!({"error": {"message": message, "no_retry": true}}),
    )
}

/// An answer with `status` and `Retry-After: seconds`.
pub fn retry_after(status: u16, seconds: &str, body: &'static str) -> Response {
    let status = StatusCode::from_u16(status).unwrap();
    (status, [("retry-after", seconds.to_string())], body).into_response()
}

/// A recording handler and the `processor` binary sending it the work in
/// a database (`testkit::Scene` runs Feed in process instead).
pub struct Spawned(pub Handler, pub Proc);

impl Spawned {
    /// Starts `processor run` (FAST settings plus `extra`) for a handler
    /// answering with `answer`.
    pub async fn start<F>(db: &TestDb, extra: &[&str], answer: F) -> Spawned
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        let handler = Handler::start(answer).await;
        let processor = Proc::start(db, &handler.url(), extra);
        Spawned(handler, processor)
    }

    /// The same with an async answer (one that may wait).
    pub async fn start_async<F, Fut>(db: &TestDb, extra: &[&str], answer: F) -> Spawned
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let handler = Handler::start_async(answer).await;
        let processor = Proc::start(db, &handler.url(), extra);
        Spawned(handler, processor)
    }
}

/// A recording handler and Feed run in this process sending it the work
/// (FAST settings): for behaviour tests that need nothing of the binary
/// (its flags, logs, signals or exit codes). `testkit::Scene` adds the
/// movable clock and more nodes.
pub struct InProcess(pub Handler, pub Node);

impl InProcess {
    /// Feed in process for a handler answering with `answer`.
    pub async fn start<F>(db: &TestDb, answer: F) -> InProcess
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        Self::start_with(db, |_| {}, answer).await
    }

    /// The same with the settings changed by `set` first.
    pub async fn start_with<F>(db: &TestDb, set: impl FnOnce(&mut Config), answer: F) -> InProcess
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        Self::serving(db, set, Handler::start(answer).await)
    }

    /// The same with an async answer (one that may wait).
    pub async fn start_async<F, Fut>(db: &TestDb, answer: F) -> InProcess
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        Self::serving(db, |_| {}, Handler::start_async(answer).await)
    }

    fn serving(db: &TestDb, set: impl FnOnce(&mut Config), handler: Handler) -> InProcess {
        let scene = Scene::serving(&db.url, handler);
        let mut config = scene.config();
        set(&mut config);
        let node = scene.node_with(config);
        InProcess(scene.handler, node)
    }
}

/// A processor started while nothing listens on its handler's port;
/// [`DownHandler::up`] brings the handler up there (the port is
/// [`Reserved`] meanwhile).
pub struct DownHandler {
    port: Reserved,
}

impl DownHandler {
    /// Starts `processor run` (FAST settings plus `extra`) for a handler
    /// that is down (connection refused).
    pub fn start(db: &TestDb, extra: &[&str]) -> (DownHandler, Proc) {
        let port = Reserved::new();
        let url = format!("http://127.0.0.1:{}/feed", port.port());
        let processor = Proc::start(db, &url, extra);
        (DownHandler { port }, processor)
    }

    /// Serves `answer` on the handler's port.
    pub async fn up<F>(self, answer: F) -> Handler
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        let listener = self.port.listen();
        Handler::serve(listener, std::sync::Arc::new(Box::new(answer))).await
    }
}

/// Waits until `cond` holds, up to `timeout`; panics with `what` otherwise.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    if !waited(timeout, cond).await {
        panic!("timed out waiting for: {what}");
    }
}

/// Waits (up to a minute) until the console at `base` (`run --ui`)
/// serves its API: its listener answers before the processor's
/// migrations are done, and the API answers 503 until then.
pub async fn wait_console(base: &str) {
    let url = format!("{base}/api/v1/status");
    wait_for("the console", Duration::from_secs(60), || async {
        reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
}

/// Whether `cond` held within `timeout` (polled every 50 ms), for a test
/// that says more than [`wait_for`] when it did not.
pub async fn waited<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The last `n` lines of a processor's log, for a failure message.
pub fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a test is handed for a backend: [`TestDb`] (migrated) or
/// [`EmptyDb`] (without Feed's tables). None skips the test (the server is
/// unreachable outside CI).
pub trait Fixture: Sized {
    fn prepare(backend: Backend) -> impl Future<Output = Option<Self>>;
}

impl Fixture for TestDb {
    async fn prepare(backend: Backend) -> Option<TestDb> {
        TestDb::new(backend).await
    }
}

/// A fresh database without Feed's tables.
pub struct EmptyDb(pub TestDb);

impl Fixture for EmptyDb {
    async fn prepare(backend: Backend) -> Option<EmptyDb> {
        TestDb::empty(backend).await.map(EmptyDb)
    }
}

/// The fixture `test` takes, for `backend`.
pub fn fixture_for<D: Fixture, Fut>(
    _test: impl FnOnce(D) -> Fut,
    backend: Backend,
) -> impl Future<Output = Option<D>> {
    D::prepare(backend)
}

/// Declares `async fn $name(db: TestDb)` (or `EmptyDb`) as one test per
/// listed backend, in a module of that name. A backend marked `[slow]`
/// runs in the slow tier only (`cargo test --workspace --tests -- --ignored`;
/// a test named `citus`, in the Citus tier: README's third command).
#[macro_export]
macro_rules! backend_tests {
    (alone $name:ident: $($test:ident => $backend:ident $([$tier:ident])?),*) => {
        $crate::backend_tests!(@alone $name: $($test => $backend $([$tier])?),*);
    };
    ($name:ident: $($test:ident => $backend:ident $([$tier:ident])?),*) => {
        $crate::backend_tests!(@shared $name: $($test => $backend $([$tier])?),*);
    };
    (@$turn:ident $name:ident: $($test:ident => $backend:ident $([$tier:ident])?),*) => {
        mod $name {
            use $crate::support::{Backend, fixture_for};
            $(
                $crate::tiered! { [$($tier)?]
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $test() {
                        let _turn = $crate::support::$turn().await;
                        if let Some(fixture) = fixture_for(super::$name, Backend::$backend).await {
                            super::$name(fixture).await
                        }
                    }
                }
            )*
        }
    };
}

/// Puts a test in its tier: unmarked, README's `cargo test --workspace`;
/// `[slow]`, the slow tier that `.ci/run` adds.
#[macro_export]
macro_rules! tiered {
    ([] $($item:tt)*) => { $($item)* };
    ([slow] $($item:tt)*) => {
        #[ignore = "slow tier: cargo test --workspace --tests -- --ignored"]
        $($item)*
    };
}

/// Declares one test per backend (SQLite, PostgreSQL, MariaDB, and Citus
/// in the Citus tier) for `async fn $name(db: TestDb)`: for what depends
/// on the database (fencing, races, locking, SQL written by hand, network
/// faults).
#[macro_export]
macro_rules! on_all_backends {
    (alone $name:ident) => {
        $crate::backend_tests!(alone $name: sqlite => Sqlite, postgres => Postgres, mariadb => Mysql, citus => Citus [slow]);
    };
    ($name:ident) => {
        $crate::backend_tests!($name: sqlite => Sqlite, postgres => Postgres, mariadb => Mysql, citus => Citus [slow]);
    };
}

/// A behaviour that does not depend on the database: SQLite in README's
/// test command, PostgreSQL and MariaDB in the slow tier.
#[macro_export]
macro_rules! behaviour {
    (alone $name:ident) => {
        $crate::backend_tests!(alone $name: sqlite => Sqlite, postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
    ($name:ident) => {
        $crate::backend_tests!($name: sqlite => Sqlite, postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
}

/// A test that takes minutes or the machine (memory bounds at scale,
/// chaos, wall-clock rates): every backend in the slow tier.
#[macro_export]
macro_rules! slow {
    (alone $name:ident) => {
        $crate::backend_tests!(alone $name: sqlite => Sqlite [slow], postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
    ($name:ident) => {
        $crate::backend_tests!($name: sqlite => Sqlite [slow], postgres => Postgres [slow], mariadb => Mysql [slow]);
    };
}

/// A test of wall-clock rates: the slow tier, alone, on PostgreSQL (what
/// a fleet of processors shares). The rates come from the engine, not the
/// database; the SQL of the buckets that processors share is held on every
/// backend by the store's conformance suite.
#[macro_export]
macro_rules! timing {
    ($name:ident) => {
        $crate::backend_tests!(alone $name: postgres => Postgres [slow]);
    };
}

/// Turns on the machine: tests that measure rates over wall-clock windows
/// (declared `alone`) run by themselves, every other backend test shares
/// the machine. Beside the whole suite a 2-core machine holds a processor
/// back for whole seconds at a time, and the rate it sends at measures the
/// machine, not Feed.
static TURNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A turn beside the other shared tests.
pub async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    TURNS.read().await
}

/// A turn with the machine to itself.
pub async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    TURNS.write().await
}
