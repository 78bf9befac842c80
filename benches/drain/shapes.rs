//! The shapes phase: the same N items drained as 100 × N/100, 1,000 × …,
//! up to N × 1 (partitions × items each), each on a fresh database with a
//! plain-SQL backlog; and how fast `Store::prune` deletes one drained shape.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;
use testkit::Backend;

use crate::Args;
use crate::drain::{Backlog, DrainRun, Workload, drain_on, mib};
use crate::fixture::{Db, Proc, insert_backlog};
use crate::handler::Handler;

/// The shape every other is compared with: 100 partitions of N/100 items.
pub(crate) const REFERENCE: usize = 100;

/// A shape on the command line: a partition count, or `n` for N × 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ShapeSel {
    Partitions(usize),
    OneEach,
}

/// Every shape, for `--shapes` without a list.
pub(crate) const ALL_SHAPES: &str = "100,1000,10000,100000,n";

pub(crate) fn shape_sel(s: &str) -> Result<ShapeSel, String> {
    match s.trim() {
        "n" | "N" => Ok(ShapeSel::OneEach),
        t => match t.parse::<usize>() {
            Ok(p) if p > 0 => Ok(ShapeSel::Partitions(p)),
            _ => Err(format!(
                "{s:?} is neither a partition count nor `n` (N × 1)"
            )),
        },
    }
}

/// The partition counts to run for `items` items: ascending, each at most
/// `items`, without repeats.
pub(crate) fn partition_counts(sel: &[ShapeSel], items: usize) -> Vec<usize> {
    let mut v: Vec<usize> = sel
        .iter()
        .map(|s| match *s {
            ShapeSel::Partitions(p) => p,
            ShapeSel::OneEach => items,
        })
        .filter(|&p| p <= items)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// One shape's drain.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ShapeRun {
    pub(crate) partitions: usize,
    pub(crate) items_per_partition: usize,
    /// items/s ÷ the reference shape's items/s in the same run.
    pub(crate) ratio_to_reference: Option<f64>,
    pub(crate) run: Option<DrainRun>,
    pub(crate) error: Option<String>,
}

/// `Store::prune(0, false)` over one drained shape, while a processor
/// drains a second backlog of the same shape and a producer keeps writing.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PruneRun {
    /// The shape it pruned (its partition count).
    pub(crate) shape_partitions: usize,
    pub(crate) partitions: u64,
    pub(crate) items: u64,
    pub(crate) seconds: f64,
    pub(crate) items_per_s: f64,
    /// Items the processor was sent while the prune ran.
    pub(crate) drained_during: u64,
    /// Items the producer wrote while the prune ran.
    pub(crate) produced_during: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Shapes {
    pub(crate) items: usize,
    pub(crate) reference_partitions: usize,
    pub(crate) shapes: Vec<ShapeRun>,
    pub(crate) prune: Option<PruneRun>,
    pub(crate) prune_error: Option<String>,
}

/// Runs every selected shape on `backend`, printing each as it finishes.
pub(crate) async fn shapes(
    backend: Backend,
    args: &Args,
    sel: &[ShapeSel],
    handler: &Handler,
    client: &reqwest::Client,
) -> Shapes {
    let items = args.shape_items(backend);
    let mut out = Shapes {
        items,
        reference_partitions: REFERENCE,
        ..Default::default()
    };
    for partitions in partition_counts(sel, items) {
        let w = Workload {
            partitions,
            backlog: Backlog::Sql,
            ..Workload::new(args, items)
        };
        let prune_here = partitions == args.prune_after;
        let r = Db::scoped(backend, args, 6, async |db| {
            let run = drain_on(db, args, w, handler, client).await?;
            let prune = if prune_here {
                Some(prune_loaded(db, handler, partitions, items).await)
            } else {
                None
            };
            Ok((run, prune))
        })
        .await;
        let mut shape = ShapeRun {
            partitions,
            items_per_partition: items / partitions,
            ..Default::default()
        };
        match r {
            Ok((run, prune)) => {
                println!("  shape {}: {}", label(&shape), describe_shape(&run));
                shape.run = Some(run);
                match prune {
                    Some(Ok(p)) => {
                        println!(
                            "  prune after shape {}: {}",
                            label(&shape),
                            describe_prune(&p)
                        );
                        out.prune = Some(p);
                    }
                    Some(Err(e)) => {
                        println!("  prune failed: {e:#}");
                        out.prune_error = Some(format!("{e:#}"));
                    }
                    None => {}
                }
            }
            Err(e) => {
                println!("  shape {} failed: {e:#}", label(&shape));
                shape.error = Some(format!("{e:#}"));
            }
        }
        out.shapes.push(shape);
    }
    let rate = |s: &ShapeRun| s.run.as_ref().map(|r| r.items_per_s);
    let reference = out
        .shapes
        .iter()
        .find(|s| s.partitions == REFERENCE)
        .and_then(rate);
    for s in &mut out.shapes {
        s.ratio_to_reference = match (rate(s), reference) {
            (Some(x), Some(r)) if r > 0.0 => Some(x / r),
            _ => None,
        };
    }
    out
}

/// Times `Store::prune` over the drained shape (`items` items in
/// `shape_partitions` partitions) while a processor drains a second backlog
/// of the same shape and a producer writes items in batches of a thousand,
/// as pruning runs in production.
async fn prune_loaded(
    db: &Db,
    handler: &Handler,
    shape_partitions: usize,
    items: usize,
) -> Result<PruneRun> {
    insert_backlog(db, items, shape_partitions, "next-").await?;
    handler.state.reset();
    let mut proc = Proc::spawn(&db.url, &handler.url(), &[])?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while handler.state.posts.load(Ordering::SeqCst) == 0 {
        proc.check_alive()?;
        if Instant::now() >= deadline {
            bail!("the second backlog's drain did not start within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stop = AtomicBool::new(false);
    let produce = async {
        let mut produced = 0;
        while !stop.load(Ordering::SeqCst) {
            insert_backlog(db, 1000, 10, &format!("more-{produced}-")).await?;
            produced += 1000;
        }
        anyhow::Ok(produced as u64)
    };
    let posts0 = handler.state.posts.load(Ordering::SeqCst);
    let t = Instant::now();
    let prune = async {
        let p = db.store.prune(Duration::ZERO, false).await;
        stop.store(true, Ordering::SeqCst);
        p
    };
    let (p, produced) = tokio::join!(prune, produce);
    let seconds = t.elapsed().as_secs_f64();
    let drained_during = handler.state.posts.load(Ordering::SeqCst) - posts0;
    proc.stop().await;
    let (p, produced_during) = (p?, produced?);
    Ok(PruneRun {
        shape_partitions,
        partitions: p.partitions,
        items: p.items,
        seconds,
        items_per_s: p.items as f64 / seconds.max(1e-6),
        drained_during,
        produced_during,
    })
}

/// `1000 × 100`.
pub(crate) fn label(s: &ShapeRun) -> String {
    format!("{} × {}", s.partitions, s.items_per_partition)
}

fn describe_shape(r: &DrainRun) -> String {
    format!(
        "{:.0} items/s  {:.2} stmt/item  drain {:.2}s  setup {:.1}s  leasing {}  peak RSS {}{}{}",
        r.items_per_s,
        r.statements_per_item,
        r.drain_s,
        r.enqueue_s,
        leasing(r),
        mib(r.peak_rss_mib),
        r.cpu
            .map(|c| format!(
                "  processor CPU {:.0} µs/item",
                r.us_per_item(c.processor_s)
            ))
            .unwrap_or_default()
            + &match r.describe_nodes() {
                n if n.is_empty() => n,
                n => format!("  {n}"),
            },
        if r.timed_out {
            format!("  TIMED OUT ({} of {} items)", r.finished, r.items)
        } else {
            String::new()
        }
    )
}

/// Leasing time, or how many partitions had been leased when it ran out.
pub(crate) fn leasing(r: &DrainRun) -> String {
    match r.leasing_s {
        Some(s) => format!("{s:.1} s"),
        None => format!(
            "> {:.0} s ({} of {})",
            r.startup_s + r.drain_s,
            r.leased,
            r.partitions
        ),
    }
}

/// A prune in one line: what it deleted, how fast, and the load beside it.
pub(crate) fn describe_prune(p: &PruneRun) -> String {
    format!(
        "{} items and {} partitions in {:.2} s = {:.0} items/s, while a processor was sent {} items and a producer wrote {}",
        p.items, p.partitions, p.seconds, p.items_per_s, p.drained_during, p.produced_during
    )
}
