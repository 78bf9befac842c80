//! The drain benchmark: how fast one real `processor` drains a
//! backlog through a real HTTP handler on SQLite, PostgreSQL and MariaDB
//! (and on Citus, the loopback cluster of `contrib/citus/cluster.sh`, with
//! `--backends citus`),
//! next to the HTTP-only ceiling of this machine; statements per item,
//! pickup latency (into held partitions, and into new ones with one and
//! three idle processors), idle cost and memory; a multi-step variant and
//! 2- and 3-processor variants.
//!
//! ```text
//! cargo bench --bench drain                      # full run (100,000 items, 100 partitions, 3 runs)
//! cargo bench --bench drain -- --quick           # 10,000 items, lighter idle and pickup phases
//! cargo bench --bench drain -- --backends postgres --items 20000
//! cargo bench --bench drain -- --help            # every option (each also FEED_BENCH_*)
//! cargo bench --bench drain -- --shapes          # adds the shapes phase (see below)
//! cargo bench --bench drain -- --traces --skip ceiling,pickup,idle,multistep,scale,batch,limits,peer
//!                                                # tracing's cost: off, 100 % and 1 % sampled
//! cargo bench --bench drain -- --backends postgres --shapes 100,10000 --skip ceiling,pickup,idle,multistep,scale,batch,peer
//! cargo bench --bench drain -- --backends postgres,citus --shapes 100,10000 --shape-items 100000 \
//!     --skip drain,ceiling,pickup,idle,multistep,spawn,scale,batch,limits,peer
//!                                                # the shapes phase alone, PostgreSQL beside Citus
//! ```
//!
//! The shapes phase drains the same N items (1,000,000 on PostgreSQL,
//! 100,000 elsewhere; `--quick` 100,000 and 20,000; `--shape-items`) as
//! 100 × N/100, 1,000 × …, 10,000 × …, 100,000 × … and N × 1 partitions ×
//! items, written with multi-row INSERTs in plain SQL, and reports items/s,
//! the ratio to the 100-partition reference shape, statements and CPU per
//! item (the processor's, and each PostgreSQL node's: the server, or the
//! Citus coordinator and each worker, from their postmasters' process trees
//! in /proc, see `nodes.rs`), peak RSS and the leasing time (spawn → every
//! partition leased once); after the 10,000-partition shape (`--prune-after`) it times
//! `Store::prune` over all its items while a processor drains a second
//! backlog of that shape and a producer keeps inserting. It is off unless
//! `--shapes` is given: at a million items per shape it would add many
//! minutes to the full run.
//!
//! The limits phase drains the items again with flow-control limits that
//! never bind (ten tenants with `feed_limits` rows, `--rate-limit` far above
//! what Feed reaches), each run paired with a plain drain, and then has
//! three processors share `--rate-limit 2000/s`, counting the handler's
//! POSTs second by second.
//!
//! The history phase (`--history 10000000`, off by default) drains that many
//! items over 100 partitions and compares the rate over the last million
//! posts with the rate over the first: whether a long drain slows as dead
//! row versions pile up.
//!
//! Every figure comes from the real binary at its default settings (only
//! `--database-url`, `--handler-url` and `--listen` are given) against a
//! fresh, uniquely named database per run, which is dropped afterwards.
//! Items are enqueued with [`feed::Store::enqueue`] (the shapes phase: plain
//! SQL) before the processor starts; the drain is timed from the handler's first POST until the
//! database shows every partition complete. Statement counts come from the
//! processor's own `feed_statements_total` on `/metrics`. Nothing here is a
//! pass/fail test: it prints a table and writes JSON to `target/bench/`.

#![recursion_limit = "256"]

mod cpu;
mod drain;
mod fixture;
mod handler;
mod history;
mod latency;
mod limits;
mod nodes;
mod peer;
mod pickup;
mod report;
mod shapes;
mod shapes_table;
mod traces;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use testkit::{Backend, Servers, Stats};

use crate::drain::{Workload, drain_once, mib};
use crate::fixture::{Db, processor_bin};
use crate::handler::{Handler, ceiling};
use crate::history::history;
use crate::latency::{idle, pickup};
use crate::report::{
    BackendReport, Machine, Report, Scenario, describe, describe_history, print_ratios,
    print_tables, scenario, share,
};
use crate::shapes::{ALL_SHAPES, ShapeSel, shape_sel, shapes};
use crate::shapes_table::print_shapes;

// ---------------------------------------------------------------- options

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Phase {
    /// The single-step drain (`--runs` × `--items`) of the main table and the ratios.
    Drain,
    /// The HTTP-only ceiling (plain reqwest loop).
    Ceiling,
    /// Pickup latency of trickled single items, into held partitions and into new ones.
    Pickup,
    /// Idle cost and memory with many idle partitions.
    Idle,
    /// Each item takes 3 handler steps across 2 gates.
    Multistep,
    /// Each partition's one item answers its items (`"items"`): children
    /// per second from answers.
    Spawn,
    /// 2 and 3 processors sharing the database.
    Scale,
    /// The drain again with `--batch-size 100`.
    Batch,
    /// The drain with flow-control limits that never bind, and a binding
    /// `--rate-limit` shared by three processors.
    Limits,
    /// graphile-worker on PostgreSQL (needs Node.js and npm).
    Peer,
    /// The drain with OpenTelemetry traces off, on at 100 % and on at 1 % (only with --traces).
    Traces,
    /// One long drain timed per million items (only with --history).
    History,
    /// The same items as 100 × N/100 … N × 1 partitions × items (only with --shapes).
    Shapes,
}

/// The batch phase's processor flags.
const BATCH_FLAGS: &[&str] = &["--batch-size", "100"];

/// The Feed drain benchmark. Every option is also read from FEED_BENCH_<NAME>.
#[derive(Parser, Debug, Clone, Serialize)]
#[command(name = "drain", bin_name = "cargo bench --bench drain --")]
pub(crate) struct Args {
    /// Backends to run, comma-separated: sqlite, postgres, mariadb, citus (the loopback cluster of
    /// contrib/citus/cluster.sh). An unreachable server is skipped.
    #[arg(
        long,
        env = "FEED_BENCH_BACKENDS",
        value_enum,
        value_delimiter = ',',
        default_value = "sqlite,postgres,mariadb"
    )]
    pub(crate) backends: Vec<Backend>,
    /// Quick mode: 10,000 items, 2,000 idle partitions, 20 pickup samples, shorter idle window.
    #[arg(long, env = "FEED_BENCH_QUICK")]
    pub(crate) quick: bool,
    /// Items to drain per run [--quick: 10000]
    #[arg(
        long,
        env = "FEED_BENCH_ITEMS",
        value_parser = at_least_one,
        default_value_t = 100_000,
        default_value_if("quick", "true", "10000")
    )]
    pub(crate) items: usize,
    /// Partitions the items are spread across
    #[arg(long, env = "FEED_BENCH_PARTITIONS", value_parser = at_least_one, default_value_t = 100)]
    pub(crate) partitions: usize,
    /// Drain runs per backend (the median is reported, with min and max)
    #[arg(long, env = "FEED_BENCH_RUNS", value_parser = at_least_one, default_value_t = 3)]
    pub(crate) runs: usize,
    /// Items per run of the multi-step and multi-processor variants [default: --items, at most 25000]
    #[arg(long, env = "FEED_BENCH_VARIANT_ITEMS")]
    variant_items: Option<usize>,
    /// Runs of each multi-step and multi-processor variant
    #[arg(long, env = "FEED_BENCH_VARIANT_RUNS", value_parser = at_least_one, default_value_t = 1)]
    pub(crate) variant_runs: usize,
    /// Backends the multi-step and 2-/3-processor variants run on
    #[arg(
        long,
        env = "FEED_BENCH_VARIANTS_ON",
        value_enum,
        value_delimiter = ',',
        default_value = "postgres"
    )]
    pub(crate) variants_on: Vec<Backend>,
    /// Fixed latency the handler waits before answering, in milliseconds
    #[arg(long, env = "FEED_BENCH_HANDLER_LATENCY_MS", default_value_t = 0)]
    pub(crate) handler_latency_ms: u64,
    /// Concurrency of the HTTP-only ceiling loop (the processor's default --concurrency)
    #[arg(long, env = "FEED_BENCH_CONCURRENCY", value_parser = at_least_one, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Idle partitions held by one processor for the idle-cost phase [--quick: 2000]
    #[arg(long, env = "FEED_BENCH_IDLE_PARTITIONS", value_parser = at_least_one, default_value_t = 10_000, default_value_if("quick", "true", "2000"))]
    pub(crate) idle_partitions: usize,
    /// Seconds feed_statements_total is sampled once every idle partition is held; the idle
    /// rate is taken over the last --idle-window seconds of it [--quick: 10]
    #[arg(long, env = "FEED_BENCH_IDLE_OBSERVE", value_parser = clap::value_parser!(u64).range(2..), default_value_t = 25, default_value_if("quick", "true", "10"))]
    pub(crate) idle_observe: u64,
    /// Seconds of the idle-rate window (the end of the observation) [--quick: 5]
    #[arg(long, env = "FEED_BENCH_IDLE_WINDOW", value_parser = clap::value_parser!(u64).range(1..), default_value_t = 10, default_value_if("quick", "true", "5"))]
    pub(crate) idle_window: u64,
    /// Single items trickled for pickup latency [--quick: 20]
    #[arg(
        long,
        env = "FEED_BENCH_TRICKLE",
        default_value_t = 50,
        default_value_if("quick", "true", "20")
    )]
    pub(crate) trickle: usize,
    /// New partitions enqueued per pickup scenario (1 processor, the processor's own API, and on
    /// PostgreSQL 3 processors); at most 50 where only a poll finds them [--quick: 20]
    #[arg(
        long,
        env = "FEED_BENCH_PICKUP_SAMPLES",
        default_value_t = 200,
        default_value_if("quick", "true", "20")
    )]
    pub(crate) pickup_samples: usize,
    /// Give up on one drain after this many seconds (reported as a partial rate)
    #[arg(long, env = "FEED_BENCH_TIMEOUT", value_parser = clap::value_parser!(u64).range(5..), default_value_t = 300)]
    pub(crate) timeout: u64,
    /// Runs the shapes phase (off by default: on PostgreSQL it drains a million items once per
    /// shape) over these partition counts, `n` meaning N × 1; `--shapes` alone runs every shape
    #[arg(
        long,
        env = "FEED_BENCH_SHAPES",
        value_parser = shape_sel,
        value_delimiter = ',',
        num_args = 0..,
        default_missing_value = ALL_SHAPES
    )]
    pub(crate) shapes: Option<Vec<ShapeSel>>,
    /// Items N of every shape [default: 1000000 on PostgreSQL, 100000 elsewhere;
    /// --quick: 100000 and 20000]
    #[arg(long, env = "FEED_BENCH_SHAPE_ITEMS", value_parser = at_least_one)]
    shape_items: Option<usize>,
    /// After the shape with this many partitions drains, time Store::prune over all its items
    /// while a processor drains a second backlog and a producer inserts
    #[arg(long, env = "FEED_BENCH_PRUNE_AFTER", default_value_t = 10_000)]
    pub(crate) prune_after: usize,
    /// Runs the history phase: one drain of this many items over 100 partitions, comparing
    /// the rate over the last million posts with the first (off by default)
    #[arg(long, env = "FEED_BENCH_HISTORY", value_parser = at_least_one)]
    pub(crate) history: Option<usize>,
    /// Adds the traces phase: the drain with OpenTelemetry traces off, on at 100 % and
    /// at 1 %, in rounds of three (off by default)
    #[arg(long, env = "FEED_BENCH_TRACES")]
    pub(crate) traces: bool,
    /// Phases to skip, comma-separated: drain, ceiling, pickup, idle, multistep, spawn, scale, batch, limits, traces, peer, shapes, history
    #[arg(long, env = "FEED_BENCH_SKIP", value_enum, value_delimiter = ',')]
    pub(crate) skip: Vec<Phase>,
    /// PostgreSQL server (databases are created and dropped on it). Without
    /// TLS by default, as the peer connects (node-postgres asks for TLS only
    /// when told to; sqlx prefers it when the server offers it)
    #[arg(
        long,
        env = "FEED_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432?sslmode=disable"
    )]
    pub(crate) postgres_url: String,
    /// MariaDB/MySQL server (databases are created and dropped on it)
    #[arg(
        long,
        env = "FEED_BENCH_MARIADB_URL",
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    pub(crate) mariadb_url: String,
    /// Directory for the JSON results [default: <target>/bench]
    #[arg(long, env = "FEED_BENCH_OUT")]
    pub(crate) out: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub(crate) bench: bool,
    /// A name filter `cargo bench` may pass; ignored.
    #[arg(hide = true)]
    #[serde(skip)]
    pub(crate) filter: Vec<String>,
}

/// A count of at least one.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

impl Args {
    /// `--variant-items`, or `--items` capped at 25,000.
    pub(crate) fn variant_items(&self) -> usize {
        self.variant_items.unwrap_or(self.items.min(25_000))
    }

    /// `--shape-items`, or the default N of `backend` in this mode.
    pub(crate) fn shape_items(&self, backend: Backend) -> usize {
        self.shape_items.unwrap_or(match (self.quick, backend) {
            (false, Backend::Postgres) => 1_000_000,
            (false, _) => 100_000,
            (true, Backend::Postgres) => 100_000,
            (true, _) => 20_000,
        })
    }

    pub(crate) fn servers(&self) -> Servers {
        Servers {
            postgres: self.postgres_url.clone(),
            mariadb: self.mariadb_url.clone(),
        }
    }

    pub(crate) fn runs(&self, p: Phase) -> bool {
        !self.skip.contains(&p)
            && (p != Phase::Shapes || self.shapes.is_some())
            && (p != Phase::History || self.history.is_some())
            && (p != Phase::Traces || self.traces)
    }
}

async fn run_backend(
    backend: Backend,
    args: &Args,
    handler: &Handler,
    client: &reqwest::Client,
) -> BackendReport {
    let mut rep = BackendReport {
        backend: backend.name().into(),
        ..Default::default()
    };
    println!("\n== {} ==", backend.name());
    if let Err(why) = args.servers().reachable(backend).await {
        println!("  skipped: {} is unreachable: {why}", backend.name());
        rep.skipped = Some(format!("unreachable: {why}"));
        return rep;
    }
    if matches!(backend, Backend::Postgres | Backend::Citus) {
        let settings = Db::scoped(backend, args, 1, async |db| {
            let rows = db
                .query(
                    "SELECT current_setting('autovacuum') AS v, \
                     'fsync ' || current_setting('fsync') || ', synchronous_commit ' \
                     || current_setting('synchronous_commit') AS d",
                    vec![],
                )
                .await?;
            let get = |c| rows.first().map(|r| r.try_get::<String>("", c)).transpose();
            Ok((get("v")?, get("d")?))
        })
        .await
        .unwrap_or_default();
        (rep.autovacuum, rep.durability) = settings;
        if let (Some(v), Some(d)) = (&rep.autovacuum, &rep.durability) {
            println!("  server: autovacuum {v}, {d}");
        }
    }

    if backend == Backend::Mysql {
        stop_strays(args).await;
    }

    // Single-step drain, each run followed by the HTTP-only ceiling.
    let (mut runs, mut errors) = (Vec::new(), Vec::new());
    let drains = if args.runs(Phase::Drain) {
        args.runs
    } else {
        0
    };
    for i in 1..=drains {
        match drain_once(
            backend,
            args,
            handler,
            client,
            Workload::new(args, args.items),
        )
        .await
        {
            Ok(mut r) => {
                if args.runs(Phase::Ceiling) {
                    match ceiling(handler, args.items, args.concurrency).await {
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
    rep.drain = (drains > 0).then_some(drain);

    if args.runs(Phase::Batch) {
        let w = Workload {
            flags: BATCH_FLAGS,
            ..Workload::new(args, args.items)
        };
        let ctx = (backend, args, handler, client);
        rep.batch = Some(variant(ctx, "batch 100", w, ceil, args.runs).await);
    }

    if args.runs(Phase::Limits) {
        rep.limits = Some(limits::limits(backend, args, handler, client, ceil).await);
    }

    if args.runs(Phase::Traces) {
        rep.traces = Some(traces::traces(backend, args, handler, client, ceil).await);
    }

    if args.runs(Phase::Pickup) && args.trickle > 0 {
        match Db::scoped(backend, args, 4, async |db| pickup(db, args, handler).await).await {
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

    if args.runs(Phase::Pickup) && args.pickup_samples > 0 {
        for (n, via) in pickup::scenarios(backend) {
            let run = async |db: &Db| pickup::pickup_new(db, args, handler, n, via).await;
            match Db::scoped(backend, args, 4, run).await {
                Ok(p) => {
                    println!(
                        "  new-partition pickup, {n} processor(s), {}: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({} samples, {} missed, {:.1} statements each)",
                        p.via,
                        p.p50_ms,
                        p.p99_ms,
                        p.max_ms,
                        p.samples,
                        p.missed,
                        p.statements_per_sample.unwrap_or(f64::NAN)
                    );
                    rep.pickup_new.push(p);
                }
                Err(e) => {
                    println!("  new-partition pickup ({n} processors, {via:?}) failed: {e:#}");
                    rep.errors.push(format!("pickup of new partitions: {e:#}"));
                }
            }
        }
    }

    if args.runs(Phase::Idle) {
        match Db::scoped(backend, args, 4, async |db| idle(db, args, handler).await).await {
            Ok(i) => {
                println!(
                    "  idle: {} partitions held after {:.1}s; {:.2} statements/s over the last {:.0}s; \
                     CPU of a core: database {}, processor {}; RSS {}",
                    i.held,
                    i.hold_s,
                    i.statements_per_s,
                    i.window_s,
                    share(i.database_cpu_share),
                    share(i.processor_cpu_share),
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

    if let Some(sel) = args.shapes.as_deref().filter(|_| args.runs(Phase::Shapes)) {
        rep.shapes = Some(shapes(backend, args, sel, handler, client).await);
    }

    if let Some(items) = args.history.filter(|_| args.runs(Phase::History)) {
        match history(backend, args, items, handler, client).await {
            Ok(h) => {
                println!("  history: {}", describe_history(&h));
                rep.history = Some(h);
            }
            Err(e) => {
                println!("  history failed: {e:#}");
                rep.errors.push(format!("history: {e:#}"));
            }
        }
    }

    let variants = args.variants_on.contains(&backend);
    if variants && args.runs(Phase::Multistep) {
        let w = Workload {
            multistep: true,
            ..Workload::new(args, args.variant_items())
        };
        let ctx = (backend, args, handler, client);
        rep.multistep = Some(
            variant(
                ctx,
                "multistep (3 steps, 2 gates)",
                w,
                ceil,
                args.variant_runs,
            )
            .await,
        );
    }
    if variants && args.runs(Phase::Spawn) {
        let w = Workload {
            backlog: crate::drain::Backlog::Spawned,
            ..Workload::new(args, args.variant_items())
        };
        let ctx = (backend, args, handler, client);
        let name = "spawned (one item per partition answers the rest)";
        rep.spawned = Some(variant(ctx, name, w, ceil, args.variant_runs).await);
    }
    if variants && args.runs(Phase::Scale) {
        for n in [2, 3] {
            let w = Workload {
                processors: n,
                ..Workload::new(args, args.variant_items())
            };
            let ctx = (backend, args, handler, client);
            rep.scale
                .push(variant(ctx, &format!("{n} processors"), w, ceil, args.variant_runs).await);
        }
    }
    rep
}

/// `--variant-runs` drains of one variant workload, printed as they finish.
pub(crate) async fn variant(
    (backend, args, handler, client): (Backend, &Args, &Handler, &reqwest::Client),
    name: &str,
    w: Workload,
    ceil: Option<Stats>,
    count: usize,
) -> Scenario {
    let (mut runs, mut errors) = (Vec::new(), Vec::new());
    for i in 1..=count {
        match drain_once(backend, args, handler, client, w).await {
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
        args.items,
        args.partitions,
        args.runs,
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
    let handler = Handler::start(Duration::from_millis(args.handler_latency_ms)).await?;
    let client = reqwest::Client::new();
    let mut backends = Vec::new();
    let mut seen = Vec::new();
    for &b in &args.backends {
        if seen.contains(&b) {
            continue;
        }
        seen.push(b);
        backends.push(run_backend(b, &args, &handler, &client).await);
    }
    let (mut peer, mut peer_note) = (None, None);
    if args.runs(Phase::Peer) && args.backends.contains(&Backend::Postgres) {
        println!(
            "\n== peer: graphile-worker {} on postgres ==",
            peer::GRAPHILE_WORKER
        );
        match peer::graphile(
            &args,
            &out_dir(&args),
            &handler,
            args.items,
            args.concurrency,
        )
        .await
        {
            Ok(Some(p)) => {
                println!(
                    "  graphile-worker: {:.0} jobs/s, enqueue {:.1}s, drain {:.2}s, worker CPU {:.1}s ({:.0} µs/job), host busy {:.0} %\n  settings: {}",
                    p.jobs_per_s,
                    p.enqueue_s,
                    p.drain_s,
                    p.cpu_s,
                    p.cpu_s * 1e6 / p.jobs.max(1) as f64,
                    p.busy_share * 100.0,
                    p.settings
                );
                peer = Some(p);
            }
            Ok(None) => peer_note = Some("skipped: Node.js is not installed".into()),
            Err(e) => {
                println!("  peer failed: {e:#}");
                peer_note = Some(format!("failed: {e:#}"));
            }
        }
    }
    let finished = chrono::Utc::now();
    let mut report = Report {
        started_at: started.to_rfc3339(),
        finished_at: finished.to_rfc3339(),
        wall_s: t0.elapsed().as_secs_f64(),
        args: args.clone(),
        machine,
        backends,
        peer,
        peer_note,
    };
    report.machine.loadavg_end = loadavg();
    print_ratios(&report);
    print_tables(&report);
    print_shapes(&report);

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

/// Stops statements that an earlier, interrupted run left executing in
/// its benchmark databases: MariaDB notices a closed connection only when
/// it writes to it, and such statements were found still running 21
/// minutes on, slowing every figure measured beside them. Nothing of this
/// run is running yet when it is called.
async fn stop_strays(args: &Args) {
    let stopped = Db::scoped(Backend::Mysql, args, 1, async |db| {
        let rows = db
            .query(
                "SELECT CAST(id AS SIGNED) AS id, CAST(time AS SIGNED) AS time FROM information_schema.processlist WHERE command <> 'Sleep' \
                 AND db LIKE 'feed\\_bench\\_%' AND id <> CONNECTION_ID()",
                vec![],
            )
            .await?;
        let mut longest = 0;
        for row in &rows {
            let id: i64 = row.try_get("", "id")?;
            longest = longest.max(row.try_get::<i64>("", "time")?);
            db.exec(&format!("KILL QUERY {id}"), vec![]).await?;
        }
        Ok((rows.len(), longest))
    })
    .await;
    match stopped {
        Ok((0, _)) => {}
        Ok((n, longest)) => println!(
            "  server: stopped {n} statement(s) an earlier run left executing (the longest for {longest} s)"
        ),
        Err(e) => {
            println!("  server: could not look for statements an earlier run left executing: {e:#}")
        }
    }
}
