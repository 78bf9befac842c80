//! The drain phase: one or more processors drain a backlog on a fresh
//! database, timed from the first POST until every partition is complete.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;
use testkit::{Backend, Outcomes};

use crate::Args;
use crate::cpu::{CpuSnap, CpuUse, clk_tck, pid_ticks};
use crate::fixture::{Db, Proc, enqueue_backlog, enqueue_folders, insert_backlog};
use crate::handler::Handler;
use crate::nodes::{NodeCpu, Watch};

/// How the backlog is written before the processor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backlog {
    /// Store::enqueue, one transaction per partition (what a library user does).
    Enqueue,
    /// Multi-row INSERTs in plain SQL (single-step items only): fast enough
    /// for a million items.
    Sql,
    /// One item per partition whose answer spawns the partition's share
    /// of the items (`"items"`): they are written by the processor.
    Spawned,
}

/// What one drain runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    pub(crate) items: usize,
    pub(crate) partitions: usize,
    pub(crate) backlog: Backlog,
    pub(crate) processors: usize,
    /// Each item takes 3 handler steps across 2 gates.
    pub(crate) multistep: bool,
    /// Flags beyond the defaults (e.g. `--batch-size`).
    pub(crate) flags: &'static [&'static str],
    /// Partitions spread round-robin over this many tenants, each with a
    /// `feed_limits` row that never binds (0: no tenants).
    pub(crate) tenants: usize,
    /// OpenTelemetry traces on, sampling this ratio of deliveries (None: off).
    pub(crate) traces: Option<&'static str>,
}

impl Workload {
    /// `items` single-step items over `--partitions`, enqueued, one processor
    /// at its defaults.
    pub(crate) fn new(args: &Args, items: usize) -> Workload {
        Workload {
            items,
            partitions: args.partitions,
            backlog: Backlog::Enqueue,
            processors: 1,
            multistep: false,
            flags: &[],
            tenants: 0,
            traces: None,
        }
    }
}

/// Waits at least `floor`, and ten times what the last poll took, between
/// polls of a count: over a million partitions a count is a scan, and the
/// benchmark must not become the database's main load.
struct Throttle {
    floor: Duration,
    next: Instant,
}

impl Throttle {
    fn new(floor: Duration) -> Throttle {
        Throttle {
            floor,
            next: Instant::now(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Records a poll that started at `started`.
    fn polled(&mut self, started: Instant) {
        let now = Instant::now();
        self.next = now + self.floor.max((now - started) * 10);
    }
}

/// Partitions not leased yet (nobody holds them and they are still
/// available): one range of the `(status, owner, id)` index, counted only
/// once, when a drain runs out of time.
const UNLEASED: &str =
    "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'available' AND owner IS NULL";

/// Whether any partition is still unleased: the first entry of that range,
/// so that polling costs the database next to nothing while it drains.
const ANY_UNLEASED: &str = "SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM feed_partitions \
     WHERE status = 'available' AND owner IS NULL LIMIT 1) u";

/// One drain on a fresh database with `processors` processors.
pub(crate) async fn drain_once(
    backend: Backend,
    args: &Args,
    handler: &Handler,
    client: &reqwest::Client,
    w: Workload,
) -> Result<DrainRun> {
    Db::scoped(backend, args, 6, async |db| {
        drain_on(db, args, w, handler, client).await
    })
    .await
}

pub(crate) async fn drain_on(
    db: &Db,
    args: &Args,
    w: Workload,
    handler: &Handler,
    client: &reqwest::Client,
) -> Result<DrainRun> {
    let Workload {
        items,
        partitions,
        processors,
        multistep,
        ..
    } = w;
    let enqueue = match w.backlog {
        Backlog::Enqueue => enqueue_backlog(db, items, partitions, multistep, w.tenants).await?,
        Backlog::Sql if multistep => bail!("plain-SQL backlogs are single-step"),
        Backlog::Sql => insert_backlog(db, items, partitions, "").await?,
        Backlog::Spawned => enqueue_folders(db, items, partitions).await?,
    };
    handler.state.reset();
    let nodes = Watch::start(db).await;
    let cpu0 = CpuSnap::take();
    let mut procs = Vec::with_capacity(processors);
    let mut env = Vec::new();
    if let Some(ratio) = w.traces {
        env = vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                crate::traces::endpoint().await,
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", ratio),
        ];
    }
    for _ in 0..processors {
        procs.push(Proc::spawn_with_env(
            &db.url,
            &handler.url(),
            w.flags,
            &env,
        )?);
    }
    let spawned = procs[0].spawned;
    let deadline = spawned + Duration::from_secs(args.timeout);
    let mut timed_out = false;
    let mut last_check = Instant::now();
    let (mut open_poll, mut lease_poll) = (
        Throttle::new(Duration::from_millis(20)),
        Throttle::new(Duration::from_millis(200)),
    );
    let mut leasing_s = None;
    let done_at = loop {
        if leasing_s.is_none() && lease_poll.due(Instant::now()) {
            let t = Instant::now();
            let unleased = db.count(ANY_UNLEASED).await?;
            lease_poll.polled(t);
            if unleased == 0 {
                leasing_s = Some(spawned.elapsed().as_secs_f64());
            }
        }
        if !open_poll.due(Instant::now()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let t = Instant::now();
        let (open, failed) = db.open_partitions().await?;
        open_poll.polled(t);
        let now = Instant::now();
        if !open {
            leasing_s.get_or_insert(now.duration_since(spawned).as_secs_f64());
            break now;
        }
        if failed {
            bail!("a partition failed during the drain; see the processor log");
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
    };
    let posts = handler.state.posts.load(Ordering::SeqCst);
    let leased = match leasing_s {
        Some(_) if !timed_out => partitions,
        _ => partitions.saturating_sub(db.count(UNLEASED).await? as usize),
    };
    let cpu1 = CpuSnap::take();
    let node_cpu = nodes.finish(db).await;
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
    let mut m = Outcomes::default();
    let mut done_per = Vec::new();
    let mut peak: Option<f64> = None;
    for p in &procs {
        let pm = p.outcomes(client).await;
        m += pm;
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
    let finished = if timed_out {
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
        finished,
        partitions,
        processors,
        steps_per_item: if multistep { 3 } else { 1 },
        enqueue_s: enqueue.as_secs_f64(),
        startup_s: first.saturating_duration_since(spawned).as_secs_f64(),
        drain_s: drain,
        items_per_s: finished as f64 / drain,
        posts,
        posts_per_s: posts as f64 / drain,
        outcomes: m,
        statements_per_item: m.statements as f64 / finished.max(1) as f64,
        done_per_processor: done_per,
        peak_rss_mib: peak,
        timed_out,
        leasing_s,
        leased,
        ceiling_posts_per_s: None,
        cpu,
        node_cpu,
    })
}

/// One drain: one fresh database, one or more processors.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DrainRun {
    pub(crate) items: usize,
    /// Items complete when the drain ended (`items` unless it timed out).
    pub(crate) finished: usize,
    pub(crate) partitions: usize,
    pub(crate) processors: usize,
    pub(crate) steps_per_item: u32,
    /// Writing the whole backlog (before the processor starts).
    pub(crate) enqueue_s: f64,
    /// Processor spawn → first POST at the handler.
    pub(crate) startup_s: f64,
    /// First POST → every partition complete (as seen by polling the database).
    pub(crate) drain_s: f64,
    pub(crate) items_per_s: f64,
    pub(crate) posts: u64,
    pub(crate) posts_per_s: f64,
    /// feed_statements_total and feed_items_total by outcome, summed over
    /// the processors when the drain was seen complete.
    #[serde(flatten)]
    pub(crate) outcomes: Outcomes,
    pub(crate) statements_per_item: f64,
    /// Items done per processor (multi-processor runs).
    pub(crate) done_per_processor: Vec<u64>,
    /// Highest VmHWM of the processors, MiB.
    pub(crate) peak_rss_mib: Option<f64>,
    /// The drain did not finish within --timeout; rates are partial.
    pub(crate) timed_out: bool,
    /// Spawn → every partition leased at least once (or the drain done);
    /// None if the drain timed out first.
    pub(crate) leasing_s: Option<f64>,
    /// Partitions leased at least once when last counted.
    pub(crate) leased: usize,
    /// HTTP-only ceiling measured right after this run (single-step drains).
    pub(crate) ceiling_posts_per_s: Option<f64>,
    /// Where the CPU went from spawn to done (Linux only).
    pub(crate) cpu: Option<CpuUse>,
    /// Each PostgreSQL node's CPU over the same window (the server; on
    /// Citus the coordinator and each worker), exited backends included.
    pub(crate) node_cpu: Vec<NodeCpu>,
}

impl DrainRun {
    /// CPU µs per finished item of `cpu_s` seconds.
    pub(crate) fn us_per_item(&self, cpu_s: f64) -> f64 {
        cpu_s * 1e6 / self.finished.max(1) as f64
    }

    /// `db 512 µs/item` or `coord 300, w9701 200, w9702 210 µs/item`;
    /// empty without node figures.
    pub(crate) fn describe_nodes(&self) -> String {
        if self.node_cpu.is_empty() {
            return String::new();
        }
        let each: Vec<String> = self
            .node_cpu
            .iter()
            .map(|n| format!("{} {:.0}", n.node, self.us_per_item(n.cpu_s)))
            .collect();
        format!("node CPU {} µs/item{}", each.join(", "), self.others_note())
    }

    /// ` (with connections to other databases: w9701 3)` when another
    /// database of a node had clients during the drain, whose work is in
    /// that node's figure; empty otherwise.
    pub(crate) fn others_note(&self) -> String {
        let busy: Vec<String> = self
            .node_cpu
            .iter()
            .filter_map(|n| {
                Some(format!(
                    "{} {}",
                    n.node,
                    n.other_connections.filter(|&c| c > 0)?
                ))
            })
            .collect();
        if busy.is_empty() {
            String::new()
        } else {
            format!(
                " (with connections to other databases: {})",
                busy.join(", ")
            )
        }
    }
}

pub(crate) fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |m| format!("{m:.1} MiB"))
}
