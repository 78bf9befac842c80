//! Test support: a fresh database per test on each backend, a real HTTP
//! handler with a ledger, and the real `processor` binary.

use std::future::Future;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement};

/// A database server Feed runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

/// A uniquely named database, dropped when the test ends.
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub store: feed::Store,
    name: String,
    /// Drop the database at the end (false for an alias).
    owned: bool,
    _dir: Option<tempfile::TempDir>,
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";

impl TestDb {
    /// A fresh, migrated database; None (skip) when the server is unreachable
    /// outside CI. In CI an unreachable server fails the test.
    pub async fn new(backend: Backend) -> Option<TestDb> {
        let db = Self::empty(backend).await?;
        db.store.migrate().await.unwrap();
        Some(db)
    }

    /// A fresh database without Feed's tables.
    pub async fn empty(backend: Backend) -> Option<TestDb> {
        let name = format!("feed_t_{}", uuid::Uuid::new_v4().simple());
        let (url, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}/feed.db?mode=rwc", dir.path().display());
                (url, Some(dir))
            }
            Backend::Postgres | Backend::Mysql => {
                let admin = if backend == Backend::Postgres {
                    PG_ADMIN
                } else {
                    MY_ADMIN
                };
                let conn = match feed::Store::connect(admin, 2).await {
                    Ok(c) => c,
                    Err(e) if std::env::var_os("CI").is_none() => {
                        eprintln!("skipping: {backend:?} unreachable: {e}");
                        return None;
                    }
                    Err(e) => panic!("{backend:?} unreachable in CI: {e}"),
                };
                conn.connection()
                    .execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .unwrap();
                let url = if backend == Backend::Postgres {
                    format!("postgres://postgres@127.0.0.1:5432/{name}")
                } else {
                    format!("mysql://root@127.0.0.1:3306/{name}")
                };
                (url, None)
            }
        };
        let store = feed::Store::connect(&url, 4).await.unwrap();
        Some(TestDb {
            backend,
            url,
            store,
            name,
            owned: true,
            _dir: dir,
        })
    }

    /// Another handle on the same database under a different URL (e.g.
    /// with a password); dropping it does not drop the database.
    pub fn alias(db: &TestDb, url: &str) -> TestDb {
        TestDb {
            backend: db.backend,
            url: url.to_string(),
            store: db.store.clone(),
            name: String::new(),
            owned: false,
            _dir: None,
        }
    }

    fn db_backend(&self) -> DbBackend {
        self.store.backend()
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

    pub async fn query(&self, sql: &str, values: Vec<sea_orm::Value>) -> Vec<QueryResult> {
        self.store
            .connection()
            .query_all_raw(self.stmt(sql, values))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn stmt(&self, sql: &str, values: Vec<sea_orm::Value>) -> Statement {
        feed::store::statement(self.db_backend(), sql, values)
    }

    /// Creates a partition with plain SQL.
    pub async fn partition(&self, id: &str, auto_close: bool, manual: bool, on_failure: &str) {
        self.exec(
            "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure) VALUES (?, ?, ?, ?)",
            vec![id.into(), auto_close.into(), manual.into(), on_failure.into()],
        )
        .await;
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
            status: r.try_get("", "status").unwrap(),
            gate: r.try_get("", "gate").unwrap(),
            attempts: r.try_get("", "attempts").unwrap(),
            last_error: r.try_get("", "last_error").unwrap(),
            data: serde_json::from_slice(&data).unwrap_or(serde_json::Value::Null),
            version: r.try_get("", "version").unwrap(),
            not_before: r.try_get("", "not_before").unwrap(),
        }
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
        let admin = match self.backend {
            _ if !self.owned => return,
            Backend::Sqlite => return,
            Backend::Postgres => PG_ADMIN,
            Backend::Mysql => MY_ADMIN,
        };
        let sql = if self.backend == Backend::Postgres {
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)
        } else {
            format!("DROP DATABASE IF EXISTS {}", self.name)
        };
        // Drop runs inside the test's runtime: use a runtime of our own on a thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(store) = feed::Store::connect(admin, 1).await {
                    let _ = store.connection().execute_unprepared(&sql).await;
                }
            });
        })
        .join();
    }
}

#[derive(Debug, Clone)]
pub struct ItemRow {
    pub status: String,
    pub gate: i64,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub data: serde_json::Value,
    pub version: i64,
    pub not_before: Option<i64>,
}

/// One request the handler received.
#[derive(Debug, Clone)]
pub struct Call {
    pub item: String,
    pub partition: String,
    pub gate: i64,
    pub attempt: u32,
    pub processor: String,
    pub idempotency_key: String,
    pub data: serde_json::Value,
    /// The request body exactly as received.
    pub body: Vec<u8>,
    pub headers: HeaderMap,
    pub at: Instant,
}

type Answer = Box<dyn Fn(&Call) -> Response + Send + Sync>;

/// A real HTTP handler served on 127.0.0.1 that records every call.
pub struct Handler {
    pub addr: SocketAddr,
    pub ledger: Arc<Mutex<Vec<Call>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Handler {
    /// Serves `answer` on a free port.
    pub async fn start<F>(answer: F) -> Handler
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(Box::new(answer))).await
    }

    /// Serves an async answer (one that may wait) on a free port.
    pub async fn start_async<F, Fut>(answer: F) -> Handler
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_async(listener, answer).await
    }

    /// Serves `answer` on a listener the caller bound (e.g. a port chosen earlier).
    pub async fn serve(listener: tokio::net::TcpListener, answer: Arc<Answer>) -> Handler {
        Self::serve_async(listener, move |c| {
            let answer = answer.clone();
            async move { answer(&c) }
        })
        .await
    }

    async fn serve_async<F, Fut>(listener: tokio::net::TcpListener, answer: F) -> Handler
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let ledger: Arc<Mutex<Vec<Call>>> = Arc::default();
        let answer = Arc::new(answer);
        let l = ledger.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let l = l.clone();
            let answer = answer.clone();
            async move {
                let call = parse_call(headers, &body);
                l.lock().push(call.clone());
                answer(call).await
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Handler { addr, ledger, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/feed", self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.ledger.lock().clone()
    }

    pub fn calls_for(&self, item: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.item == item)
            .collect()
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn parse_call(headers: HeaderMap, body: &[u8]) -> Call {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    Call {
        item: h("feed-item-id"),
        partition: h("feed-partition-id"),
        gate: h("feed-gate").parse().unwrap_or(-1),
        attempt: h("feed-attempt").parse().unwrap_or(0),
        processor: h("feed-processor-id"),
        idempotency_key: h("idempotency-key"),
        data: serde_json::from_slice(body).unwrap_or(serde_json::Value::Null),
        body: body.to_vec(),
        headers: headers.clone(),
        at: Instant::now(),
    }
}

/// A JSON answer with a status.
pub fn json(status: u16, body: serde_json::Value) -> Response {
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

/// What a handler does with `Feed-Signature`: recompute the HMAC of
/// "t.body" with the secret and compare.
pub fn signed(header: &str, secret: &[u8], body: &[u8]) -> bool {
    let Some((t, _)) = header.trim_start_matches("t=").split_once(",v1=") else {
        return false;
    };
    let Ok(t) = t.parse() else { return false };
    feed::handler::signature(secret, t, body) == header
}

/// A free TCP port on 127.0.0.1 (nothing listens on it when this returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `processor run`, killed when dropped.
pub struct Proc {
    pub child: Child,
    pub listen: Option<String>,
    log: std::path::PathBuf,
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
    /// Starts `processor run` with FAST settings plus `extra`.
    pub fn start(db: &TestDb, handler_url: &str, extra: &[&str]) -> Proc {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let log =
            std::env::temp_dir().join(format!("feed-test-{}.log", uuid::Uuid::new_v4().simple()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_processor"));
        cmd.arg("run")
            .args([
                "--database-url",
                &db.url,
                "--handler-url",
                handler_url,
                "--listen",
                &listen,
            ])
            .args(FAST)
            .args(extra)
            .env("RUST_LOG", "info,feed=debug,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("spawn processor");
        Proc {
            child,
            listen: Some(listen),
            log,
        }
    }

    /// The processor's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` text.
    pub async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.listen.as_ref().unwrap());
        match reqwest::get(url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Sends SIGTERM and waits for exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- processor log ----\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Waits until `cond` holds, up to `timeout`; panics with `what` otherwise.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The value of a metric line (`name{labels} value`), 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Declares one test per backend for an `async fn(Backend)`.
#[macro_export]
macro_rules! on_all_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use $crate::support::Backend;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() { super::$name(Backend::Sqlite).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() { super::$name(Backend::Postgres).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mariadb() { super::$name(Backend::Mysql).await }
            }
        )*
    };
}
