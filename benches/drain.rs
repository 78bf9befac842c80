//! The drain benchmark: how fast one real `processor` drains a
//! backlog through a real HTTP handler on SQLite, PostgreSQL and MariaDB,
//! next to the HTTP-only ceiling of this machine; statements per item,
//! pickup latency, idle cost and memory; a multi-step variant and 2- and
//! 3-processor variants.
//!
//! ```text
//! cargo bench --bench drain                      # full run (100,000 items, 100 partitions, 3 runs)
//! cargo bench --bench drain -- --quick           # 10,000 items, lighter idle and pickup phases
//! cargo bench --bench drain -- --backends postgres --items 20000
//! cargo bench --bench drain -- --help            # every option (each also FEED_BENCH_*)
//! ```
//!
//! Every figure comes from the real binary at its default settings (only
//! `--database-url`, `--handler-url` and `--listen` are given) against a
//! fresh, uniquely named database per run, which is dropped afterwards.
//! Items are enqueued with [`feed::Store::enqueue`] before the processor
//! starts; the drain is timed from the handler's first POST until the
//! database shows every partition complete. Statement counts come from the
//! processor's own `feed_statements_total` on `/metrics`. Nothing here is a
//! pass/fail test: it prints a table and writes JSON to `target/bench/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use clap::{Parser, ValueEnum};
use comfy_table::{Table, presets::ASCII_MARKDOWN};
use feed::Store;
use feed::store::{NewItem, PartitionSpec};
use sea_orm::{ConnectionTrait, QueryResult, Value};
use serde::Serialize;
use tokio::task::JoinSet;

/// The processor under test: this build's, or `FEED_BENCH_PROCESSOR` (an
/// earlier build, to compare before and after on the same machine).
fn processor_bin() -> String {
    std::env::var("FEED_BENCH_PROCESSOR")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_processor").to_string())
}

// ---------------------------------------------------------------- options

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Backend {
    Sqlite,
    Postgres,
    #[value(alias = "mysql")]
    Mariadb,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mariadb => "mariadb",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    /// The HTTP-only ceiling (plain reqwest loop).
    Ceiling,
    /// Pickup latency of trickled single items.
    Pickup,
    /// Idle cost and memory with many idle partitions.
    Idle,
    /// Each item takes 3 handler steps across 2 gates.
    Multistep,
    /// 2 and 3 processors sharing the database.
    Scale,
}

/// The Feed drain benchmark. Every option is also read from FEED_BENCH_<NAME>.
#[derive(Parser, Debug, Clone, Serialize)]
#[command(name = "drain", bin_name = "cargo bench --bench drain --")]
struct Args {
    /// Backends to run, comma-separated: sqlite, postgres, mariadb. An unreachable server is skipped.
    #[arg(
        long,
        env = "FEED_BENCH_BACKENDS",
        value_enum,
        value_delimiter = ',',
        default_value = "sqlite,postgres,mariadb"
    )]
    backends: Vec<Backend>,
    /// Quick mode: 10,000 items, 2,000 idle partitions, 20 pickup samples, shorter idle window.
    #[arg(long, env = "FEED_BENCH_QUICK")]
    quick: bool,
    /// Items to drain per run [default: 100000; --quick: 10000]
    #[arg(long, env = "FEED_BENCH_ITEMS")]
    items: Option<usize>,
    /// Partitions the items are spread across
    #[arg(long, env = "FEED_BENCH_PARTITIONS", default_value_t = 100)]
    partitions: usize,
    /// Drain runs per backend (the median is reported, with min and max)
    #[arg(long, env = "FEED_BENCH_RUNS", default_value_t = 3)]
    runs: usize,
    /// Items per run of the multi-step and multi-processor variants [default: --items, at most 25000]
    #[arg(long, env = "FEED_BENCH_VARIANT_ITEMS")]
    variant_items: Option<usize>,
    /// Runs of each multi-step and multi-processor variant
    #[arg(long, env = "FEED_BENCH_VARIANT_RUNS", default_value_t = 1)]
    variant_runs: usize,
    /// Backends the multi-step and 2-/3-processor variants run on
    #[arg(
        long,
        env = "FEED_BENCH_VARIANTS_ON",
        value_enum,
        value_delimiter = ',',
        default_value = "postgres"
    )]
    variants_on: Vec<Backend>,
    /// Fixed latency the handler waits before answering, in milliseconds
    #[arg(long, env = "FEED_BENCH_HANDLER_LATENCY_MS", default_value_t = 0)]
    handler_latency_ms: u64,
    /// Concurrency of the HTTP-only ceiling loop (the processor's default --concurrency)
    #[arg(long, env = "FEED_BENCH_CONCURRENCY", default_value_t = 64)]
    concurrency: usize,
    /// Idle partitions held by one processor for the idle-cost phase [default: 10000; --quick: 2000]
    #[arg(long, env = "FEED_BENCH_IDLE_PARTITIONS")]
    idle_partitions: Option<usize>,
    /// Seconds feed_statements_total is sampled once every idle partition is held; the idle
    /// rate is taken over the last --idle-window seconds of it [default: 25; --quick: 10]
    #[arg(long, env = "FEED_BENCH_IDLE_OBSERVE")]
    idle_observe: Option<u64>,
    /// Seconds of the idle-rate window (the end of the observation) [default: 10; --quick: 5]
    #[arg(long, env = "FEED_BENCH_IDLE_WINDOW")]
    idle_window: Option<u64>,
    /// Single items trickled for pickup latency [default: 50; --quick: 20]
    #[arg(long, env = "FEED_BENCH_TRICKLE")]
    trickle: Option<usize>,
    /// Give up on one drain after this many seconds (reported as a partial rate)
    #[arg(long, env = "FEED_BENCH_TIMEOUT", default_value_t = 300)]
    timeout: u64,
    /// Phases to skip, comma-separated: ceiling, pickup, idle, multistep, scale
    #[arg(long, env = "FEED_BENCH_SKIP", value_enum, value_delimiter = ',')]
    skip: Vec<Phase>,
    /// PostgreSQL server (databases are created and dropped on it)
    #[arg(
        long,
        env = "FEED_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    postgres_url: String,
    /// MariaDB/MySQL server (databases are created and dropped on it)
    #[arg(
        long,
        env = "FEED_BENCH_MARIADB_URL",
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    mariadb_url: String,
    /// Directory for the JSON results [default: <target>/bench]
    #[arg(long, env = "FEED_BENCH_OUT")]
    out: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    #[serde(skip)]
    bench: bool,
    /// A name filter `cargo bench` may pass; ignored.
    #[arg(hide = true)]
    #[serde(skip)]
    filter: Vec<String>,
}

/// Options with the defaults of the chosen mode filled in.
#[derive(Debug, Clone, Serialize)]
struct Settings {
    items: usize,
    partitions: usize,
    runs: usize,
    variant_items: usize,
    variant_runs: usize,
    concurrency: usize,
    handler_latency_ms: u64,
    idle_partitions: usize,
    idle_observe_s: u64,
    idle_window_s: u64,
    trickle: usize,
    timeout_s: u64,
}

impl Args {
    fn settings(&self) -> Settings {
        let q = self.quick;
        let items = self.items.unwrap_or(if q { 10_000 } else { 100_000 });
        Settings {
            items,
            variant_items: self.variant_items.unwrap_or(items.min(25_000)),
            partitions: self.partitions.max(1),
            runs: self.runs.max(1),
            variant_runs: self.variant_runs.max(1),
            concurrency: self.concurrency.max(1),
            handler_latency_ms: self.handler_latency_ms,
            idle_partitions: self
                .idle_partitions
                .unwrap_or(if q { 2_000 } else { 10_000 }),
            idle_observe_s: self.idle_observe.unwrap_or(if q { 10 } else { 25 }).max(2),
            idle_window_s: self.idle_window.unwrap_or(if q { 5 } else { 10 }).max(1),
            trickle: self.trickle.unwrap_or(if q { 20 } else { 50 }),
            timeout_s: self.timeout.max(5),
        }
    }

    fn runs(&self, p: Phase) -> bool {
        !self.skip.contains(&p)
    }
}

// ---------------------------------------------------------------- results

#[derive(Debug, Clone, Copy, Serialize)]
struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

impl Stats {
    fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stats {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// One drain: one fresh database, one or more processors.
#[derive(Debug, Clone, Default, Serialize)]
struct DrainRun {
    items: usize,
    partitions: usize,
    processors: usize,
    steps_per_item: u32,
    /// Enqueue of the whole backlog with Store::enqueue (before the processor starts).
    enqueue_s: f64,
    /// Processor spawn → first POST at the handler.
    startup_s: f64,
    /// First POST → every partition complete (as seen by polling the database).
    drain_s: f64,
    items_per_s: f64,
    posts: u64,
    posts_per_s: f64,
    /// feed_statements_total of all processors when the drain was seen complete.
    statements: u64,
    statements_per_item: f64,
    /// feed_items_total by outcome, summed over processors.
    done: u64,
    stepped: u64,
    retried: u64,
    rejected: u64,
    failed: u64,
    /// Items done per processor (multi-processor runs).
    done_per_processor: Vec<u64>,
    /// Highest VmHWM of the processors, MiB.
    peak_rss_mib: Option<f64>,
    /// The drain did not finish within --timeout; rates are partial.
    timed_out: bool,
    /// HTTP-only ceiling measured right after this run (single-step drains).
    ceiling_posts_per_s: Option<f64>,
    /// Where the CPU went from spawn to done (Linux only).
    cpu: Option<CpuUse>,
}

/// CPU seconds spent from processor spawn until the drain was seen done.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct CpuUse {
    window_s: f64,
    /// The processor(s), SQLite included for that backend.
    processor_s: f64,
    /// This process: the handler, plus the benchmark's completion polling.
    handler_s: f64,
    /// PostgreSQL or MariaDB server processes.
    database_s: f64,
    /// Every CPU of the machine busy (anything, other work included).
    machine_busy_s: f64,
    /// window × CPUs.
    machine_capacity_s: f64,
}

/// Cumulative CPU ticks of what a drain is made of.
#[derive(Debug, Clone, Copy, Default)]
struct CpuSnap {
    own: u64,
    database: u64,
    machine_busy: u64,
}

impl CpuSnap {
    fn take() -> CpuSnap {
        CpuSnap {
            own: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| stat_ticks(&s))
                .unwrap_or(0),
            database: database_ticks(),
            machine_busy: machine_busy_ticks(),
        }
    }
}

/// utime + stime of a /proc/<pid>/stat line.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn pid_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_ticks(&s))
        .unwrap_or(0)
}

/// Ticks of every PostgreSQL and MariaDB/MySQL server process.
fn database_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let comm = stat
            .split_once('(')
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map_or("", |(c, _)| c);
        if matches!(comm, "postgres" | "mariadbd" | "mysqld") {
            total += stat_ticks(&stat).unwrap_or(0);
        }
    }
    total
}

/// Busy ticks of all CPUs (everything but idle and iowait).
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() < 5 {
        return 0;
    }
    f.iter().sum::<u64>() - f[3] - f[4]
}

/// Clock ticks per second of /proc figures.
fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[derive(Debug, Clone, Serialize)]
struct Scenario {
    name: String,
    runs: Vec<DrainRun>,
    items_per_s: Option<Stats>,
    posts_per_s: Option<Stats>,
    ceiling_posts_per_s: Option<Stats>,
    /// Median Feed POSTs/s ÷ median ceiling POSTs/s.
    ratio_to_ceiling: Option<f64>,
    statements_per_item: Option<Stats>,
    errors: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Pickup {
    /// Idle partitions the processor held while items were trickled in.
    partitions: usize,
    samples: usize,
    /// Enqueue call start → first POST of the item at the handler.
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
    /// Duration of the enqueue call itself (included in the latency).
    enqueue_p50_ms: f64,
    latencies_ms: Vec<f64>,
    missed: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Idle {
    partitions: usize,
    held: usize,
    /// Spawn → every idle partition held.
    hold_s: f64,
    /// feed_statements_total once per second after they were all held.
    statements_series: Vec<u64>,
    window_s: f64,
    statements_in_window: u64,
    statements_per_s: f64,
    rss_mib: Option<f64>,
    peak_rss_mib: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
struct BackendReport {
    backend: String,
    skipped: Option<String>,
    drain: Option<Scenario>,
    multistep: Option<Scenario>,
    scale: Vec<Scenario>,
    pickup: Option<Pickup>,
    idle: Option<Idle>,
    errors: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    loadavg_start: String,
    loadavg_end: String,
    kernel: String,
    git: String,
    processor_binary: String,
    release_build: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    started_at: String,
    finished_at: String,
    wall_s: f64,
    settings: Settings,
    args: Args,
    machine: Machine,
    backends: Vec<BackendReport>,
}

// ---------------------------------------------------------------- handler

/// The in-process handler: counts POSTs, remembers when the first one came
/// and when each trickled item (id `pickup-*`) was first seen.
struct Handler {
    addr: SocketAddr,
    state: Arc<HandlerState>,
}

struct HandlerState {
    base: Instant,
    posts: AtomicU64,
    /// Nanoseconds since `base` (+1) of the first POST since the last reset; 0 = none yet.
    first: AtomicU64,
    latency: Duration,
    seen: Mutex<std::collections::HashMap<String, Instant>>,
}

impl HandlerState {
    fn reset(&self) {
        self.posts.store(0, Ordering::SeqCst);
        self.first.store(0, Ordering::SeqCst);
        self.seen.lock().unwrap().clear();
    }

    fn first_post(&self) -> Option<Instant> {
        match self.first.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.base + Duration::from_nanos(n - 1)),
        }
    }

    fn seen(&self, id: &str) -> Option<Instant> {
        self.seen.lock().unwrap().get(id).copied()
    }
}

async fn answer(State(s): State<Arc<HandlerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = Instant::now();
    s.posts.fetch_add(1, Ordering::Relaxed);
    if s.first.load(Ordering::Relaxed) == 0 {
        let n = u64::try_from((now - s.base).as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let _ = s
            .first
            .compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
    }
    if let Some(id) = headers.get("feed-item-id").and_then(|v| v.to_str().ok())
        && id.starts_with("pickup-")
    {
        s.seen.lock().unwrap().entry(id.to_string()).or_insert(now);
    }
    if !s.latency.is_zero() {
        tokio::time::sleep(s.latency).await;
    }
    let reply: &'static str = match step_of(&body) {
        None => r#"{"done":true}"#,
        // Multi-step: gate 0 → gate 1, then one more step at gate 1, then done.
        Some(0) => r#"{"gate":1,"data":{"s":1}}"#,
        Some(1) => r#"{"data":{"s":2}}"#,
        Some(_) => r#"{"done":true}"#,
    };
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        reply,
    )
        .into_response()
}

/// The step counter `s` of a multi-step item's data; None for single-step items.
fn step_of(body: &[u8]) -> Option<u64> {
    if !body.windows(4).any(|w| w == br#""s":"#) {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("s")?
        .as_u64()
}

impl Handler {
    async fn start(latency: Duration) -> Result<Handler> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(HandlerState {
            base: Instant::now(),
            posts: AtomicU64::new(0),
            first: AtomicU64::new(0),
            latency,
            seen: Mutex::default(),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("handler stopped: {e}");
            }
        });
        Ok(Handler { addr, state })
    }

    fn url(&self) -> String {
        format!("http://{}/feed", self.addr)
    }
}

// ---------------------------------------------------------------- databases

/// A fresh, uniquely named, migrated database; `drop_db` removes it.
struct Db {
    backend: Backend,
    url: String,
    name: String,
    admin: Option<String>,
    store: Store,
    _dir: Option<tempfile::TempDir>,
}

fn server_url(base: &str, db: &str) -> Result<String> {
    let mut u = url::Url::parse(base).with_context(|| format!("bad server URL {base}"))?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

fn admin_url(backend: Backend, args: &Args) -> Result<Option<String>> {
    Ok(match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(server_url(&args.postgres_url, "postgres")?),
        Backend::Mariadb => Some(server_url(&args.mariadb_url, "")?),
    })
}

async fn connect(url: &str, pool: u32) -> Result<Store> {
    match tokio::time::timeout(Duration::from_secs(15), Store::connect(url, pool)).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("connecting timed out"),
    }
}

/// Whether a backend's server answers; the reason when it does not.
async fn reachable(backend: Backend, args: &Args) -> Result<(), String> {
    let Some(admin) = admin_url(backend, args).map_err(|e| e.to_string())? else {
        return Ok(());
    };
    let store = connect(&admin, 1).await.map_err(|e| format!("{e:#}"))?;
    store
        .connection()
        .execute_unprepared("SELECT 1")
        .await
        .map_err(|e| e.to_string())?;
    let _ = store.connection().clone().close().await;
    Ok(())
}

impl Db {
    async fn create(backend: Backend, args: &Args, pool: u32) -> Result<Db> {
        let name = format!("feed_bench_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_url(backend, args)?;
        let (url, dir) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::Builder::new().prefix("feed-bench-").tempdir()?;
                let url = format!("sqlite://{}/feed.db?mode=rwc", dir.path().display());
                (url, Some(dir))
            }
            Backend::Postgres | Backend::Mariadb => {
                let admin_store = connect(admin.as_deref().unwrap_or_default(), 1).await?;
                admin_store
                    .connection()
                    .execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await?;
                let _ = admin_store.connection().clone().close().await;
                let base = if backend == Backend::Postgres {
                    &args.postgres_url
                } else {
                    &args.mariadb_url
                };
                (server_url(base, &name)?, None)
            }
        };
        let db = Db {
            backend,
            store: match connect(&url, pool).await {
                Ok(s) => s,
                Err(e) => {
                    drop_database(backend, admin.as_deref(), &name).await;
                    return Err(e);
                }
            },
            url,
            name,
            admin,
            _dir: dir,
        };
        if let Err(e) = db.store.migrate().await {
            db.drop_db().await;
            return Err(e.into());
        }
        Ok(db)
    }

    async fn drop_db(self) {
        let _ = self.store.connection().clone().close().await;
        drop_database(self.backend, self.admin.as_deref(), &self.name).await;
    }

    /// Runs SQL written with `?` placeholders (numbered for PostgreSQL).
    async fn query(&self, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>> {
        Ok(self
            .store
            .connection()
            .query_all_raw(feed::store::statement(self.store.backend(), sql, values))
            .await?)
    }

    async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64> {
        Ok(self
            .store
            .connection()
            .execute_raw(feed::store::statement(self.store.backend(), sql, values))
            .await?
            .rows_affected())
    }

    async fn count(&self, sql: &str) -> Result<i64> {
        let rows = self.query(sql, vec![]).await?;
        let row = rows.first().ok_or_else(|| anyhow!("no row from {sql}"))?;
        Ok(row.try_get::<i64>("", "n")?)
    }

    /// (partitions not complete, partitions failed).
    async fn open_partitions(&self) -> Result<(i64, i64)> {
        let rows = self
            .query(
                "SELECT status, COUNT(*) AS n FROM feed_partitions GROUP BY status",
                vec![],
            )
            .await?;
        let (mut open, mut failed) = (0, 0);
        for r in rows {
            let status: String = r.try_get("", "status")?;
            let n: i64 = r.try_get("", "n")?;
            if status != "complete" {
                open += n;
            }
            if status == "failed" {
                failed += n;
            }
        }
        Ok((open, failed))
    }
}

async fn drop_database(backend: Backend, admin: Option<&str>, name: &str) {
    let Some(admin) = admin else { return };
    let sql = if backend == Backend::Postgres {
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    } else {
        format!("DROP DATABASE IF EXISTS {name}")
    };
    match connect(admin, 1).await {
        Ok(store) => {
            if let Err(e) = store.connection().execute_unprepared(&sql).await {
                eprintln!("  warning: could not drop database {name}: {e}");
            }
            let _ = store.connection().clone().close().await;
        }
        Err(e) => eprintln!("  warning: could not drop database {name}: {e:#}"),
    }
}

// ---------------------------------------------------------------- processes

/// A running `processor run` at its defaults; killed if dropped.
struct Proc {
    child: Child,
    metrics_url: String,
    log: PathBuf,
    spawned: Instant,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Proc {
    fn spawn(db_url: &str, handler_url: &str) -> Result<Proc> {
        let listen = format!("127.0.0.1:{}", free_port()?);
        let log =
            std::env::temp_dir().join(format!("feed-bench-{}.log", uuid::Uuid::new_v4().simple()));
        let mut cmd = Command::new(processor_bin());
        cmd.arg("run")
            .args(["--database-url", db_url])
            .args(["--handler-url", handler_url])
            .args(["--listen", &listen]);
        // Defaults for everything else: no FEED_* or RUST_LOG from this shell.
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str()
                && (k.starts_with("FEED_") || k == "RUST_LOG")
            {
                cmd.env_remove(k);
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", processor_bin()))?;
        Ok(Proc {
            child,
            metrics_url: format!("http://{listen}/metrics"),
            log,
            spawned: Instant::now(),
        })
    }

    /// Fails with the end of the log when the processor has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "processor exited early ({status}); log tail:\n{}",
                self.log_tail(15)
            );
        }
        Ok(())
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    async fn metrics(&self, client: &reqwest::Client) -> Result<Metrics> {
        let text = client
            .get(&self.metrics_url)
            .timeout(Duration::from_secs(5))
            .send()
            .await?
            .text()
            .await?;
        Ok(Metrics::parse(&text))
    }

    /// VmRSS and VmHWM from /proc, in MiB (Linux only).
    fn memory(&self) -> (Option<f64>, Option<f64>) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map(|kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// SIGTERM (graceful: release partitions, delete the session), then wait.
    async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("  warning: processor did not stop on SIGTERM; killing it");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Metrics {
    statements: u64,
    done: u64,
    stepped: u64,
    retried: u64,
    rejected: u64,
    failed: u64,
}

impl Metrics {
    fn parse(text: &str) -> Metrics {
        let get = |series: &str| -> u64 {
            text.lines()
                .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(0, |v| v as u64)
        };
        let outcome = |o: &str| get(&format!("feed_items_total{{outcome=\"{o}\"}}"));
        Metrics {
            statements: get("feed_statements_total"),
            done: outcome("done"),
            stepped: outcome("stepped"),
            retried: outcome("retried"),
            rejected: outcome("rejected"),
            failed: outcome("failed"),
        }
    }
}

// ---------------------------------------------------------------- workload

fn item_body(n: usize, multistep: bool) -> Vec<u8> {
    if multistep {
        format!(r#"{{"n":{n},"s":0}}"#).into_bytes()
    } else {
        format!(r#"{{"n":{n}}}"#).into_bytes()
    }
}

/// Enqueues `items` across `partitions` with Store::enqueue (one transaction
/// per partition), `parallel` partitions at a time.
async fn enqueue_backlog(
    db: &Db,
    items: usize,
    partitions: usize,
    multistep: bool,
) -> Result<Duration> {
    let parallel = if db.backend == Backend::Sqlite { 1 } else { 4 };
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for t in 0..parallel {
        let store = db.store.clone();
        tasks.spawn(async move {
            for k in (t..partitions).step_by(parallel) {
                let count = items / partitions + usize::from(k < items % partitions);
                let batch = (0..count)
                    .map(|j| NewItem {
                        id: None,
                        gate: None,
                        data: item_body(j * partitions + k, multistep),
                    })
                    .collect();
                store
                    .enqueue(&format!("p-{k:05}"), &PartitionSpec::default(), batch)
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(started.elapsed())
}

/// Creates `n` empty partitions with auto_close = false (they stay open and
/// held while idle), in multi-row INSERTs as any producer may (the schema is
/// a public contract).
async fn idle_partitions(db: &Db, n: usize) -> Result<()> {
    let ids: Vec<String> = (0..n).map(|k| format!("idle-{k:06}")).collect();
    for chunk in ids.chunks(500) {
        let rows = vec!["(?, ?)"; chunk.len()].join(", ");
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 2);
        for id in chunk {
            values.push(id.clone().into());
            values.push(false.into());
        }
        db.exec(
            &format!("INSERT INTO feed_partitions (id, auto_close) VALUES {rows}"),
            values,
        )
        .await?;
    }
    Ok(())
}

/// Waits until `want` open partitions have an owner; returns how many do.
async fn wait_held(
    db: &Db,
    procs: &mut [&mut Proc],
    want: usize,
    timeout: Duration,
) -> Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        for p in procs.iter_mut() {
            p.check_alive()?;
        }
        let held = db
            .count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'available' AND owner IS NOT NULL")
            .await? as usize;
        if held >= want || Instant::now() >= deadline {
            return Ok(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------- phases

/// What one drain runs.
#[derive(Debug, Clone, Copy)]
struct Workload {
    items: usize,
    processors: usize,
    /// Each item takes 3 handler steps across 2 gates.
    multistep: bool,
}

/// One drain on a fresh database with `processors` processors.
async fn drain_once(
    backend: Backend,
    args: &Args,
    s: &Settings,
    handler: &Handler,
    client: &reqwest::Client,
    w: Workload,
) -> Result<DrainRun> {
    let db = Db::create(backend, args, 6).await?;
    let r = drain_on(&db, s, w, handler, client).await;
    db.drop_db().await;
    r
}

async fn drain_on(
    db: &Db,
    s: &Settings,
    w: Workload,
    handler: &Handler,
    client: &reqwest::Client,
) -> Result<DrainRun> {
    let Workload {
        items,
        processors,
        multistep,
    } = w;
    let enqueue = enqueue_backlog(db, items, s.partitions, multistep).await?;
    handler.state.reset();
    let cpu0 = CpuSnap::take();
    let mut procs = Vec::with_capacity(processors);
    for _ in 0..processors {
        procs.push(Proc::spawn(&db.url, &handler.url())?);
    }
    let spawned = procs[0].spawned;
    let deadline = spawned + Duration::from_secs(s.timeout_s);
    let mut timed_out = false;
    let mut last_check = Instant::now();
    let done_at = loop {
        let (open, failed) = db.open_partitions().await?;
        let now = Instant::now();
        if open == 0 {
            break now;
        }
        if failed > 0 {
            bail!("{failed} partition(s) failed during the drain; see the processor log");
        }
        if now >= deadline {
            timed_out = true;
            break now;
        }
        if now - last_check > Duration::from_millis(500) {
            for p in &mut procs {
                p.check_alive()?;
            }
            last_check = now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let posts = handler.state.posts.load(Ordering::SeqCst);
    let cpu1 = CpuSnap::take();
    let proc_ticks: u64 = procs.iter().map(|p| pid_ticks(p.child.id())).sum();
    let cpu = (cpu1.machine_busy > 0).then(|| {
        let t = clk_tck();
        let window = done_at.duration_since(spawned).as_secs_f64();
        CpuUse {
            window_s: window,
            processor_s: proc_ticks as f64 / t,
            handler_s: cpu1.own.saturating_sub(cpu0.own) as f64 / t,
            database_s: cpu1.database.saturating_sub(cpu0.database) as f64 / t,
            machine_busy_s: cpu1.machine_busy.saturating_sub(cpu0.machine_busy) as f64 / t,
            machine_capacity_s: window
                * std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        }
    });
    let mut m = Metrics::default();
    let mut done_per = Vec::new();
    let mut peak: Option<f64> = None;
    for p in &procs {
        let pm = p.metrics(client).await.unwrap_or_default();
        m.statements += pm.statements;
        m.done += pm.done;
        m.stepped += pm.stepped;
        m.retried += pm.retried;
        m.rejected += pm.rejected;
        m.failed += pm.failed;
        done_per.push(pm.done);
        if let (_, Some(hwm)) = p.memory() {
            peak = Some(peak.map_or(hwm, |x: f64| x.max(hwm)));
        }
    }
    let first = handler.state.first_post().unwrap_or(spawned);
    let drain = done_at
        .saturating_duration_since(first)
        .as_secs_f64()
        .max(1e-6);
    let finished_items = if timed_out {
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'")
            .await? as usize
    } else {
        items
    };
    for p in procs {
        p.stop().await;
    }
    Ok(DrainRun {
        items,
        partitions: s.partitions,
        processors,
        steps_per_item: if multistep { 3 } else { 1 },
        enqueue_s: enqueue.as_secs_f64(),
        startup_s: first.saturating_duration_since(spawned).as_secs_f64(),
        drain_s: drain,
        items_per_s: finished_items as f64 / drain,
        posts,
        posts_per_s: posts as f64 / drain,
        statements: m.statements,
        statements_per_item: m.statements as f64 / finished_items.max(1) as f64,
        done: m.done,
        stepped: m.stepped,
        retried: m.retried,
        rejected: m.rejected,
        failed: m.failed,
        done_per_processor: done_per,
        peak_rss_mib: peak,
        timed_out,
        ceiling_posts_per_s: None,
        cpu,
    })
}

/// The HTTP-only ceiling: `n` POSTs like the processor's (same headers and
/// bodies) to the same handler at `concurrency` with a plain reqwest loop.
async fn ceiling(handler: &Handler, n: usize, concurrency: usize) -> Result<f64> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = reqwest::Url::parse(&handler.url())?;
    handler.state.reset();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..concurrency {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                let id = format!("c-{i}");
                let resp = client
                    .post(url.clone())
                    .header("Content-Type", "application/json")
                    .header("Feed-Item-Id", &id)
                    .header("Feed-Partition-Id", "p-00000")
                    .header("Feed-Gate", "0")
                    .header("Feed-Attempt", "1")
                    .header("Feed-Processor-Id", "ceiling")
                    .header("Idempotency-Key", format!("{id}:0"))
                    .body(item_body(i, false))
                    .send()
                    .await?;
                let status = resp.status();
                let body = resp.bytes().await?;
                if !status.is_success() || body.is_empty() {
                    bail!("handler answered {status}");
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

fn scenario(
    name: &str,
    runs: Vec<DrainRun>,
    errors: Vec<String>,
    ceiling: Option<Stats>,
) -> Scenario {
    let ips: Vec<f64> = runs.iter().map(|r| r.items_per_s).collect();
    let pps: Vec<f64> = runs.iter().map(|r| r.posts_per_s).collect();
    let spi: Vec<f64> = runs.iter().map(|r| r.statements_per_item).collect();
    let own: Vec<f64> = runs.iter().filter_map(|r| r.ceiling_posts_per_s).collect();
    let ceiling = Stats::of(&own).or(ceiling);
    let posts = Stats::of(&pps);
    Scenario {
        name: name.to_string(),
        items_per_s: Stats::of(&ips),
        posts_per_s: posts,
        ratio_to_ceiling: match (posts, ceiling) {
            (Some(p), Some(c)) if c.median > 0.0 => Some(p.median / c.median),
            _ => None,
        },
        ceiling_posts_per_s: ceiling,
        statements_per_item: Stats::of(&spi),
        runs,
        errors,
    }
}

fn describe(r: &DrainRun) -> String {
    format!(
        "{:>8.0} items/s  {:>6.2} stmt/item  drain {:.2}s  startup {:.2}s  enqueue {:.1}s  posts {}{}{}{}",
        r.items_per_s,
        r.statements_per_item,
        r.drain_s,
        r.startup_s,
        r.enqueue_s,
        r.posts,
        r.ceiling_posts_per_s
            .map(|c| format!("  ceiling {c:.0} POST/s"))
            .unwrap_or_default(),
        r.cpu
            .map(|c| format!(
                "  CPU s: processor {:.1}, handler {:.1}, database {:.1}, machine busy {:.1} of {:.1}",
                c.processor_s, c.handler_s, c.database_s, c.machine_busy_s, c.machine_capacity_s
            ))
            .unwrap_or_default(),
        if r.timed_out { "  TIMED OUT" } else { "" },
    )
}

/// Pickup latency: single items enqueued, at random moments, into idle
/// partitions the processor already holds; enqueue call → first POST.
async fn pickup(backend: Backend, args: &Args, s: &Settings, handler: &Handler) -> Result<Pickup> {
    let db = Db::create(backend, args, 4).await?;
    let r = pickup_on(&db, s, handler).await;
    db.drop_db().await;
    r
}

async fn pickup_on(db: &Db, s: &Settings, handler: &Handler) -> Result<Pickup> {
    let parts = s.partitions.clamp(1, 1000);
    idle_partitions(db, parts).await?;
    handler.state.reset();
    let mut proc = Proc::spawn(&db.url, &handler.url())?;
    let held = wait_held(db, &mut [&mut proc], parts, Duration::from_secs(60)).await?;
    if held < parts {
        bail!("the processor held only {held} of {parts} partitions after 60 s");
    }
    // Let the first gate checks of the new leases settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let open = PartitionSpec {
        auto_close: false,
        ..PartitionSpec::default()
    };
    let (mut lat, mut enq) = (Vec::new(), Vec::new());
    let mut missed = 0;
    for i in 0..s.trickle {
        tokio::time::sleep(Duration::from_millis(rand::random_range(50..400))).await;
        proc.check_alive()?;
        let id = format!("pickup-{i}");
        let partition = format!("idle-{:06}", rand::random_range(0..parts));
        let t0 = Instant::now();
        db.store
            .enqueue(
                &partition,
                &open,
                vec![NewItem {
                    id: Some(id.clone()),
                    gate: None,
                    data: item_body(i, false),
                }],
            )
            .await?;
        enq.push(t0.elapsed().as_secs_f64() * 1e3);
        let deadline = t0 + Duration::from_secs(15);
        loop {
            if let Some(at) = handler.state.seen(&id) {
                lat.push(at.saturating_duration_since(t0).as_secs_f64() * 1e3);
                break;
            }
            if Instant::now() >= deadline {
                missed += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    proc.stop().await;
    if lat.is_empty() {
        bail!("no trickled item reached the handler within 15 s");
    }
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    let mut es = enq.clone();
    es.sort_by(f64::total_cmp);
    Ok(Pickup {
        partitions: parts,
        samples: lat.len(),
        p50_ms: percentile(&sorted, 50.0),
        p99_ms: percentile(&sorted, 99.0),
        max_ms: sorted[sorted.len() - 1],
        mean_ms: lat.iter().sum::<f64>() / lat.len() as f64,
        enqueue_p50_ms: percentile(&es, 50.0),
        latencies_ms: lat,
        missed,
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Idle cost: one processor holding many idle partitions; statements per
/// second once they are all held, and resident memory.
async fn idle(backend: Backend, args: &Args, s: &Settings, handler: &Handler) -> Result<Idle> {
    let db = Db::create(backend, args, 4).await?;
    let r = idle_on(&db, s, handler).await;
    db.drop_db().await;
    r
}

async fn idle_on(db: &Db, s: &Settings, handler: &Handler) -> Result<Idle> {
    let n = s.idle_partitions.max(1);
    idle_partitions(db, n).await?;
    let client = reqwest::Client::new();
    let mut proc = Proc::spawn(&db.url, &handler.url())?;
    let held = wait_held(db, &mut [&mut proc], n, Duration::from_secs(240)).await?;
    let hold_s = proc.spawned.elapsed().as_secs_f64();
    if held < n {
        eprintln!(
            "  warning: only {held} of {n} idle partitions held after 240 s; measuring anyway"
        );
    }
    let mut series = Vec::new();
    let start = Instant::now();
    for k in 0..=s.idle_observe_s {
        tokio::time::sleep_until((start + Duration::from_secs(k)).into()).await;
        proc.check_alive()?;
        series.push(proc.metrics(&client).await?.statements);
    }
    let (rss, hwm) = proc.memory();
    proc.stop().await;
    let w = s.idle_window_s.min(s.idle_observe_s) as usize;
    let last = series[series.len() - 1];
    let before = series[series.len() - 1 - w];
    Ok(Idle {
        partitions: n,
        held,
        hold_s,
        statements_series: series,
        window_s: w as f64,
        statements_in_window: last - before,
        statements_per_s: (last - before) as f64 / w as f64,
        rss_mib: rss,
        peak_rss_mib: hwm,
    })
}

// ---------------------------------------------------------------- driver

async fn run_backend(
    backend: Backend,
    args: &Args,
    s: &Settings,
    handler: &Handler,
    client: &reqwest::Client,
) -> BackendReport {
    let mut rep = BackendReport {
        backend: backend.name().into(),
        ..Default::default()
    };
    println!("\n== {} ==", backend.name());
    if let Err(why) = reachable(backend, args).await {
        println!("  skipped: {} is unreachable: {why}", backend.name());
        rep.skipped = Some(format!("unreachable: {why}"));
        return rep;
    }

    // Single-step drain, each run followed by the HTTP-only ceiling.
    let (mut runs, mut errors) = (Vec::new(), Vec::new());
    for i in 1..=s.runs {
        match drain_once(
            backend,
            args,
            s,
            handler,
            client,
            Workload {
                items: s.items,
                processors: 1,
                multistep: false,
            },
        )
        .await
        {
            Ok(mut r) => {
                if args.runs(Phase::Ceiling) {
                    match ceiling(handler, s.items, s.concurrency).await {
                        Ok(c) => r.ceiling_posts_per_s = Some(c),
                        Err(e) => errors.push(format!("ceiling: {e:#}")),
                    }
                }
                println!("  drain run {i}: {}", describe(&r));
                runs.push(r);
            }
            Err(e) => {
                println!("  drain run {i} failed: {e:#}");
                errors.push(format!("run {i}: {e:#}"));
            }
        }
    }
    let drain = scenario("drain", runs, errors, None);
    let ceil = drain.ceiling_posts_per_s;
    rep.drain = Some(drain);

    if args.runs(Phase::Pickup) && s.trickle > 0 {
        match pickup(backend, args, s, handler).await {
            Ok(p) => {
                println!(
                    "  pickup: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({} samples, enqueue p50 {:.1} ms)",
                    p.p50_ms, p.p99_ms, p.max_ms, p.samples, p.enqueue_p50_ms
                );
                rep.pickup = Some(p);
            }
            Err(e) => {
                println!("  pickup failed: {e:#}");
                rep.errors.push(format!("pickup: {e:#}"));
            }
        }
    }

    if args.runs(Phase::Idle) {
        match idle(backend, args, s, handler).await {
            Ok(i) => {
                println!(
                    "  idle: {} partitions held after {:.1}s; {:.2} statements/s over the last {:.0}s; RSS {}",
                    i.held,
                    i.hold_s,
                    i.statements_per_s,
                    i.window_s,
                    mib(i.rss_mib)
                );
                rep.idle = Some(i);
            }
            Err(e) => {
                println!("  idle failed: {e:#}");
                rep.errors.push(format!("idle: {e:#}"));
            }
        }
    }

    let variants = args.variants_on.contains(&backend);
    if variants && args.runs(Phase::Multistep) {
        let w = Workload {
            items: s.variant_items,
            processors: 1,
            multistep: true,
        };
        let ctx = (backend, args, s, handler, client);
        rep.multistep = Some(variant(ctx, "multistep (3 steps, 2 gates)", w, ceil).await);
    }
    if variants && args.runs(Phase::Scale) {
        for n in [2, 3] {
            let w = Workload {
                items: s.variant_items,
                processors: n,
                multistep: false,
            };
            let ctx = (backend, args, s, handler, client);
            rep.scale
                .push(variant(ctx, &format!("{n} processors"), w, ceil).await);
        }
    }
    rep
}

/// `--variant-runs` drains of one variant workload, printed as they finish.
async fn variant(
    (backend, args, s, handler, client): (Backend, &Args, &Settings, &Handler, &reqwest::Client),
    name: &str,
    w: Workload,
    ceil: Option<Stats>,
) -> Scenario {
    let (mut runs, mut errors) = (Vec::new(), Vec::new());
    for i in 1..=s.variant_runs {
        match drain_once(backend, args, s, handler, client, w).await {
            Ok(r) => {
                let per = if w.processors > 1 {
                    format!("  done per processor {:?}", r.done_per_processor)
                } else {
                    String::new()
                };
                println!("  {name} run {i}: {}{per}", describe(&r));
                runs.push(r);
            }
            Err(e) => {
                println!("  {name} run {i} failed: {e:#}");
                errors.push(format!("run {i}: {e:#}"));
            }
        }
    }
    scenario(name, runs, errors, ceil)
}

/// Median CPU microseconds per item of the runs: processor / database / handler / machine.
fn cpu_cell(runs: &[DrainRun]) -> String {
    let per = |f: fn(&CpuUse) -> f64| {
        let v: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.cpu.map(|c| f(&c) * 1e6 / r.items.max(1) as f64))
            .collect();
        Stats::of(&v).map(|s| s.median)
    };
    match (
        per(|c| c.processor_s),
        per(|c| c.database_s),
        per(|c| c.handler_s),
        per(|c| c.machine_busy_s),
    ) {
        (Some(p), Some(d), Some(h), Some(m)) => format!("{p:.0} / {d:.0} / {h:.0} / {m:.0}"),
        _ => "n/a".into(),
    }
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |m| format!("{m:.1} MiB"))
}

fn stats_cell(s: Option<Stats>) -> String {
    match s {
        Some(s) if (s.max - s.min).abs() < 0.5 => format!("{:.0}", s.median),
        Some(s) => format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max),
        None => "n/a".into(),
    }
}

fn print_tables(report: &Report) {
    let s = &report.settings;
    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN).set_header(vec![
        "backend",
        "scenario",
        "items/s median (min–max)",
        "handler POST/s",
        "HTTP ceiling POST/s",
        "Feed / ceiling",
        "stmts/item",
        "CPU µs/item: processor / database / handler / machine busy",
        "peak RSS",
    ]);
    for b in &report.backends {
        if b.skipped.is_some() {
            // The reason was printed above and is in the JSON.
            t.add_row(vec![b.backend.clone(), "skipped: unreachable".into()]);
            continue;
        }
        let scenarios = b
            .drain
            .iter()
            .chain(b.multistep.iter())
            .chain(b.scale.iter());
        for sc in scenarios {
            let peak = sc
                .runs
                .iter()
                .filter_map(|r| r.peak_rss_mib)
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
            let timed_out = sc.runs.iter().any(|r| r.timed_out);
            t.add_row(vec![
                b.backend.clone(),
                format!(
                    "{}, {} items ×{}{}",
                    sc.name,
                    sc.runs.first().map_or(0, |r| r.items),
                    sc.runs.len(),
                    if timed_out {
                        " (timed out: partial)"
                    } else {
                        ""
                    }
                ),
                stats_cell(sc.items_per_s),
                stats_cell(sc.posts_per_s),
                stats_cell(sc.ceiling_posts_per_s),
                sc.ratio_to_ceiling
                    .map_or("n/a".into(), |r| format!("{:.0} %", r * 100.0)),
                sc.statements_per_item
                    .map_or("n/a".into(), |x| format!("{:.2}", x.median)),
                cpu_cell(&sc.runs),
                mib(peak),
            ]);
            for e in &sc.errors {
                t.add_row(vec![b.backend.clone(), format!("{}: error: {e}", sc.name)]);
            }
        }
    }
    println!(
        "\nDrain: {} items across {} partitions, one POST per step, handler latency {} ms, ceiling at concurrency {}",
        s.items, s.partitions, s.handler_latency_ms, s.concurrency
    );
    println!("{t}");

    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN).set_header(vec![
        "backend",
        "pickup p50",
        "pickup p99",
        "idle partitions held",
        "time to hold them",
        "idle stmts/s",
        "idle RSS",
    ]);
    for b in &report.backends {
        if b.skipped.is_some() || (b.pickup.is_none() && b.idle.is_none()) {
            continue;
        }
        let (p50, p99) = b.pickup.as_ref().map_or(("n/a".into(), "n/a".into()), |p| {
            (format!("{:.1} ms", p.p50_ms), format!("{:.1} ms", p.p99_ms))
        });
        let (held, hold, rate, rss) = b.idle.as_ref().map_or(
            ("n/a".into(), "n/a".into(), "n/a".into(), "n/a".into()),
            |i| {
                (
                    format!("{} / {}", i.held, i.partitions),
                    format!("{:.1} s", i.hold_s),
                    format!("{:.2}", i.statements_per_s),
                    mib(i.rss_mib),
                )
            },
        );
        t.add_row(vec![b.backend.clone(), p50, p99, held, hold, rate, rss]);
    }
    if !t.is_empty() {
        println!(
            "\nPickup ({} trickled single items into held idle partitions; enqueue call → first POST) and idle cost:",
            s.trickle
        );
        println!("{t}");
    }
    for b in &report.backends {
        for e in &b.errors {
            println!("  {}: {e}", b.backend);
        }
    }
}

fn git_describe() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let rev = run(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{rev}-dirty") } else { rev }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `<target>/bench`, found from the processor binary (`<target>/<profile>/processor`).
fn out_dir(args: &Args) -> PathBuf {
    if let Some(d) = &args.out {
        return d.clone();
    }
    Path::new(env!("CARGO_BIN_EXE_processor"))
        .parent()
        .and_then(Path::parent)
        .map(|t| t.join("bench"))
        .unwrap_or_else(|| PathBuf::from("target/bench"))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let s = args.settings();
    let started = chrono::Utc::now();
    let t0 = Instant::now();
    let bin = processor_bin();
    let profile = Path::new(&bin)
        .parent()
        .and_then(|p| p.file_name())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let release = profile == "release";
    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg_start: loadavg(),
        loadavg_end: String::new(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        git: git_describe(),
        processor_binary: bin.clone(),
        release_build: release,
    };
    println!(
        "Feed drain benchmark: {} items, {} partitions, {} runs; processor {} ({}); {} CPUs, load {}",
        s.items,
        s.partitions,
        s.runs,
        bin,
        if release {
            "release build"
        } else {
            "NOT a release build"
        },
        machine.cpus,
        machine.loadavg_start
    );
    if !release {
        println!("  warning: the processor binary is not a release build; run with `cargo bench`");
    }
    let handler = Handler::start(Duration::from_millis(s.handler_latency_ms)).await?;
    let client = reqwest::Client::new();
    let mut backends = Vec::new();
    let mut seen = Vec::new();
    for &b in &args.backends {
        if seen.contains(&b) {
            continue;
        }
        seen.push(b);
        backends.push(run_backend(b, &args, &s, &handler, &client).await);
    }
    let finished = chrono::Utc::now();
    let mut report = Report {
        started_at: started.to_rfc3339(),
        finished_at: finished.to_rfc3339(),
        wall_s: t0.elapsed().as_secs_f64(),
        settings: s,
        args: args.clone(),
        machine,
        backends,
    };
    report.machine.loadavg_end = loadavg();
    print_tables(&report);

    let dir = out_dir(&args);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = serde_json::to_string_pretty(&report)?;
    let file = dir.join(format!("drain-{}.json", started.format("%Y%m%dT%H%M%SZ")));
    std::fs::write(&file, &json)?;
    std::fs::write(dir.join("latest.json"), &json)?;
    println!(
        "\nwall time {:.0} s; load average at the end {}; JSON: {} (and latest.json beside it)",
        report.wall_s,
        report.machine.loadavg_end,
        file.display()
    );
    Ok(())
}
