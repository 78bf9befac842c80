//! What a run measured, and the tables printed from it.

use comfy_table::{Table, presets::ASCII_MARKDOWN};
use serde::Serialize;
use testkit::Stats;

use crate::Args;
use crate::cpu::CpuUse;
use crate::drain::{DrainRun, mib};
use crate::history::History;
use crate::peer::{GRAPHILE_WORKER, PeerRun};
use crate::shapes::Shapes;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scenario {
    pub(crate) name: String,
    pub(crate) runs: Vec<DrainRun>,
    pub(crate) items_per_s: Option<Stats>,
    pub(crate) posts_per_s: Option<Stats>,
    pub(crate) ceiling_posts_per_s: Option<Stats>,
    /// Median Feed POSTs/s ÷ median ceiling POSTs/s.
    pub(crate) ratio_to_ceiling: Option<f64>,
    pub(crate) statements_per_item: Option<Stats>,
    pub(crate) errors: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Pickup {
    /// Idle partitions the processor held while items were trickled in
    /// (0: each item went into a new partition).
    pub(crate) partitions: usize,
    /// Idle processors running.
    pub(crate) processors: usize,
    /// How the items were enqueued.
    pub(crate) via: String,
    pub(crate) samples: usize,
    /// Enqueue call start → first POST of the item at the handler.
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) mean_ms: f64,
    /// Duration of the enqueue call itself (included in the latency).
    pub(crate) enqueue_p50_ms: f64,
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) missed: usize,
    /// Statements of all processors per sample, beyond their idle rate.
    pub(crate) statements_per_sample: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Idle {
    pub(crate) partitions: usize,
    pub(crate) held: usize,
    /// Spawn → every idle partition held.
    pub(crate) hold_s: f64,
    /// feed_statements_total once per second after they were all held.
    pub(crate) statements_series: Vec<u64>,
    pub(crate) window_s: f64,
    pub(crate) statements_in_window: u64,
    pub(crate) statements_per_s: f64,
    pub(crate) rss_mib: Option<f64>,
    pub(crate) peak_rss_mib: Option<f64>,
    /// CPU seconds per second over the window (1.0 = one core busy).
    pub(crate) database_cpu_share: Option<f64>,
    pub(crate) processor_cpu_share: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct BackendReport {
    pub(crate) backend: String,
    pub(crate) skipped: Option<String>,
    /// PostgreSQL's `autovacuum` setting: the figures depend on it.
    pub(crate) autovacuum: Option<String>,
    /// PostgreSQL's `fsync` and `synchronous_commit` (on Citus the
    /// coordinator's; the loopback cluster runs without either).
    pub(crate) durability: Option<String>,
    pub(crate) drain: Option<Scenario>,
    /// The same drain with `--batch-size 100`.
    pub(crate) batch: Option<Scenario>,
    /// Flow control: its cost when no limit binds, and a binding rate's accuracy.
    pub(crate) limits: Option<Limits>,
    /// OpenTelemetry traces off, on at 100 % and at 1 %.
    pub(crate) traces: Option<crate::traces::Traces>,
    pub(crate) multistep: Option<Scenario>,
    /// Each partition's one item answers its items (`"items"`).
    pub(crate) spawned: Option<Scenario>,
    pub(crate) scale: Vec<Scenario>,
    pub(crate) pickup: Option<Pickup>,
    /// Pickup of new partitions, per scenario (processors, how enqueued).
    pub(crate) pickup_new: Vec<Pickup>,
    pub(crate) idle: Option<Idle>,
    pub(crate) shapes: Option<Shapes>,
    pub(crate) history: Option<History>,
    pub(crate) errors: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) loadavg_start: String,
    pub(crate) loadavg_end: String,
    pub(crate) kernel: String,
    pub(crate) git: String,
    pub(crate) processor_binary: String,
    pub(crate) release_build: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) started_at: String,
    pub(crate) finished_at: String,
    pub(crate) wall_s: f64,
    pub(crate) args: Args,
    pub(crate) machine: Machine,
    pub(crate) backends: Vec<BackendReport>,
    /// graphile-worker on PostgreSQL, same handler and job count.
    pub(crate) peer: Option<PeerRun>,
    pub(crate) peer_note: Option<String>,
}

pub(crate) fn scenario(
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

pub(crate) fn describe(r: &DrainRun) -> String {
    format!(
        "{:>8.0} items/s  {:>6.2} stmt/item  drain {:.2}s  startup {:.2}s  enqueue {:.1}s  posts {}{}{}{}{}",
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
        match r.describe_nodes() {
            n if n.is_empty() => n,
            n => format!("; {n}"),
        },
        if r.timed_out { "  TIMED OUT" } else { "" },
    )
}

/// Median CPU microseconds per item of the runs: processor / database / handler / machine.
pub(crate) fn cpu_cell(runs: &[DrainRun]) -> String {
    let per = |f: fn(&CpuUse) -> f64| {
        let v: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.cpu.map(|c| f(&c) * 1e6 / r.finished.max(1) as f64))
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

pub(crate) fn stats_cell(s: Option<Stats>) -> String {
    match s {
        Some(s) if (s.max - s.min).abs() < 0.5 => format!("{:.0}", s.median),
        Some(s) => format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max),
        None => "n/a".into(),
    }
}

pub(crate) fn print_tables(report: &Report) {
    let s = &report.args;
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
        "host busy",
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
            .chain(b.batch.iter())
            .chain(b.multistep.iter())
            .chain(b.spawned.iter())
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
                busy_cell(&sc.runs),
                mib(peak),
            ]);
            for e in &sc.errors {
                t.add_row(vec![b.backend.clone(), format!("{}: error: {e}", sc.name)]);
            }
        }
    }
    if !t.is_empty() {
        println!(
            "\nDrain: {} items across {} partitions, one POST per step, handler latency {} ms, ceiling at concurrency {}",
            s.items, s.partitions, s.handler_latency_ms, s.concurrency
        );
        println!("{t}");
    }

    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN).set_header(vec![
        "backend",
        "pickup p50",
        "pickup p99",
        "idle partitions held",
        "time to hold them",
        "idle stmts/s",
        "idle CPU share of a core: database / processor",
        "idle RSS",
    ]);
    for b in &report.backends {
        if b.skipped.is_some() || (b.pickup.is_none() && b.idle.is_none()) {
            continue;
        }
        let (p50, p99) = b.pickup.as_ref().map_or(("n/a".into(), "n/a".into()), |p| {
            (format!("{:.1} ms", p.p50_ms), format!("{:.1} ms", p.p99_ms))
        });
        let (held, hold, rate, cpu, rss) = b.idle.as_ref().map_or(
            (
                "n/a".into(),
                "n/a".into(),
                "n/a".into(),
                "n/a".into(),
                "n/a".into(),
            ),
            |i| {
                (
                    format!("{} / {}", i.held, i.partitions),
                    format!("{:.1} s", i.hold_s),
                    format!("{:.2}", i.statements_per_s),
                    format!(
                        "{} / {}",
                        share(i.database_cpu_share),
                        share(i.processor_cpu_share)
                    ),
                    mib(i.rss_mib),
                )
            },
        );
        t.add_row(vec![
            b.backend.clone(),
            p50,
            p99,
            held,
            hold,
            rate,
            cpu,
            rss,
        ]);
    }
    if !t.is_empty() {
        println!(
            "\nPickup ({} trickled single items into held idle partitions; enqueue call → first POST) and idle cost:",
            s.trickle
        );
        println!("{t}");
    }
    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN).set_header(vec![
        "backend",
        "idle processors",
        "enqueued through",
        "pickup p50",
        "pickup p99",
        "max",
        "samples (missed)",
        "statements per pickup, all processors",
    ]);
    for b in &report.backends {
        for p in &b.pickup_new {
            t.add_row(vec![
                b.backend.clone(),
                p.processors.to_string(),
                p.via.clone(),
                format!("{:.1} ms", p.p50_ms),
                format!("{:.1} ms", p.p99_ms),
                format!("{:.1} ms", p.max_ms),
                format!("{} ({})", p.samples, p.missed),
                p.statements_per_sample
                    .map_or("n/a".into(), |n| format!("{n:.1}")),
            ]);
        }
    }
    if !t.is_empty() {
        println!(
            "\nPickup of new partitions (one item into a partition nobody holds; enqueue call → first POST):"
        );
        println!("{t}");
    }
    for b in &report.backends {
        for e in &b.errors {
            println!("  {}: {e}", b.backend);
        }
    }
}

/// A CPU share as a percentage of one core.
pub(crate) fn share(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |x| format!("{:.1} %", x * 100.0))
}

/// Median share of the machine's CPU time that was busy during the runs.
pub(crate) fn busy_cell(runs: &[DrainRun]) -> String {
    let v: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.cpu)
        .filter(|c| c.machine_capacity_s > 0.0)
        .map(|c| c.machine_busy_s / c.machine_capacity_s)
        .collect();
    Stats::of(&v).map_or("n/a".into(), |s| format!("{:.0} %", s.median * 100.0))
}

/// Median processor CPU µs per item of a scenario.
fn processor_us(sc: &Scenario) -> Option<f64> {
    let v: Vec<f64> = sc
        .runs
        .iter()
        .filter_map(|r| {
            r.cpu
                .map(|c| c.processor_s * 1e6 / r.finished.max(1) as f64)
        })
        .collect();
    Stats::of(&v).map(|s| s.median)
}

/// The ratios the goals are stated in, first, each with its figures.
pub(crate) fn print_ratios(report: &Report) {
    let drain = |name: &str| {
        report
            .backends
            .iter()
            .find(|b| b.backend == name)
            .and_then(|b| b.drain.as_ref())
    };
    let ips = |sc: Option<&Scenario>| sc.and_then(|s| s.items_per_s).map(|s| s.median);
    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN)
        .set_header(vec!["ratio", "value", "figures (items/s)"]);
    let mut row = |what: String, a: Option<f64>, b: Option<f64>| {
        if let (Some(a), Some(b)) = (a, b)
            && b > 0.0
        {
            t.add_row(vec![
                what,
                format!("{:.2}×", a / b),
                format!("{a:.0} / {b:.0}"),
            ]);
        }
    };
    let peer = report.peer.as_ref().map(|p| p.jobs_per_s);
    let pg = ips(drain("postgres"));
    row(
        format!("PostgreSQL: Feed / graphile-worker {GRAPHILE_WORKER}"),
        pg,
        peer,
    );
    row(
        "PostgreSQL: Feed / HTTP ceiling (POST/s)".into(),
        drain("postgres")
            .and_then(|d| d.posts_per_s)
            .map(|s| s.median),
        drain("postgres")
            .and_then(|d| d.ceiling_posts_per_s)
            .map(|s| s.median),
    );
    row(
        "SQLite Feed / graphile-worker on PostgreSQL".into(),
        ips(drain("sqlite")),
        peer,
    );
    row(
        "MariaDB Feed / PostgreSQL Feed".into(),
        ips(drain("mariadb")),
        pg,
    );
    for b in &report.backends {
        row(
            format!("{}: --batch-size 100 / 1", b.backend),
            ips(b.batch.as_ref()),
            ips(b.drain.as_ref()),
        );
    }
    for b in &report.backends {
        row(
            format!("{}: limits not binding / none (paired runs)", b.backend),
            ips(b.limits.as_ref().map(|l| &l.free)),
            ips(b.limits.as_ref().map(|l| &l.none)),
        );
    }
    for b in &report.backends {
        for (name, traced) in [
            ("traces 100 % / off", b.traces.as_ref().map(|t| &t.all)),
            (
                "traces 1 % / off",
                b.traces.as_ref().map(|t| &t.one_percent),
            ),
        ] {
            row(
                format!("{}: {name} (rounds)", b.backend),
                ips(traced),
                ips(b.traces.as_ref().map(|t| &t.off)),
            );
        }
    }
    if !t.is_empty() {
        println!("\nRatios (same run):");
        println!("{t}");
    }
    for b in &report.backends {
        if let Some(t) = &b.traces {
            let us = |s: &Scenario| processor_us(s).map_or("n/a".into(), |u| format!("{u:.0}"));
            println!(
                "  {}: processor CPU µs/item with traces off / 100 % / 1 %: {} / {} / {}",
                b.backend,
                us(&t.off),
                us(&t.all),
                us(&t.one_percent)
            );
        }
    }
    for b in &report.backends {
        if let Some(us) = b.drain.as_ref().and_then(processor_us) {
            let batch = b.batch.as_ref().and_then(processor_us);
            println!(
                "  {}: processor CPU {us:.0} µs/item single{}",
                b.backend,
                batch.map_or(String::new(), |x| format!(
                    ", {x:.0} µs/item with --batch-size 100"
                ))
            );
        }
    }
    match (&report.peer, &report.peer_note) {
        (Some(p), _) => println!(
            "  graphile-worker {GRAPHILE_WORKER}: {:.0} jobs/s, {:.0} µs CPU/job (Node.js worker), host busy {:.0} %; settings {}",
            p.jobs_per_s,
            p.cpu_s * 1e6 / p.jobs.max(1) as f64,
            p.busy_share * 100.0,
            p.settings
        ),
        (None, Some(note)) => println!("  graphile-worker: {note}"),
        (None, None) => {}
    }
}

/// The history phase in one line: first and last window's rates, their
/// ratio, and the whole drain.
pub(crate) fn describe_history(h: &History) -> String {
    let rate = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.0} items/s"));
    format!(
        "{} items over {} partitions: first {} posts {}, last {} {} (last ÷ first {}); whole drain {}",
        h.items,
        h.partitions,
        h.window,
        rate(h.first_per_s),
        h.window,
        rate(h.last_per_s),
        h.ratio.map_or("-".into(), |r| format!("{r:.2}")),
        h.run.as_ref().map_or("-".into(), describe),
    )
}

/// Both measurements of the phase.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Limits {
    /// The drain without limits, each run paired with one of `free`.
    pub(crate) none: Scenario,
    /// The drain with limits that never bind.
    pub(crate) free: Scenario,
    /// The binding run.
    pub(crate) accuracy: Option<Accuracy>,
}

/// A binding `--rate-limit` shared by three processors.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Accuracy {
    pub(crate) limit_per_s: f64,
    pub(crate) processors: usize,
    /// Items at the handler in each whole second of the drain (the first
    /// and the last, partial, left out).
    pub(crate) per_second: Vec<u64>,
    /// The mean of those over the limit.
    pub(crate) mean_ratio: f64,
    /// The farthest one second strayed from the limit, as a share of it.
    pub(crate) worst_off: f64,
    /// The same but for the last three seconds, when processors run out of
    /// work one by one and strand what they had reserved.
    pub(crate) steady_worst_off: f64,
    pub(crate) run: DrainRun,
}
