//! Pickup latency of items added to held partitions (enqueue → first
//! POST), what every pickup figure is summed up as, and the idle cost of
//! holding many partitions.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use feed::store::{NewItem, PartitionSpec};
use testkit::{Backend, percentile};

use crate::Args;
use crate::cpu::{clk_tck, database_ticks, pid_ticks};
use crate::fixture::{Db, Proc, idle_partitions, item_body, wait_held};
use crate::handler::Handler;
use crate::report::{Idle, Pickup};

/// Pickup latency: single items enqueued, at random moments, into idle
/// partitions the processor already holds; enqueue call → first POST.
pub(crate) async fn pickup(db: &Db, args: &Args, handler: &Handler) -> Result<Pickup> {
    let parts = args.partitions.clamp(1, 1000);
    idle_partitions(db, parts).await?;
    handler.state.reset();
    let mut proc = Proc::spawn(&db.url, &handler.url(), &[])?;
    let held = wait_held(db, &mut [&mut proc], parts, Duration::from_secs(60)).await?;
    if held < parts {
        bail!("the processor held only {held} of {parts} partitions after 60 s");
    }
    // Let the first gate checks of the new leases settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut open = PartitionSpec::default();
    open.auto_close = false;
    let (mut lat, mut enq) = (Vec::new(), Vec::new());
    let mut missed = 0;
    for i in 0..args.trickle {
        tokio::time::sleep(Duration::from_millis(rand::random_range(50..400))).await;
        proc.check_alive()?;
        let id = format!("pickup-{i}");
        let partition = format!("idle-{:06}", rand::random_range(0..parts));
        let t0 = Instant::now();
        db.store
            .enqueue(
                &partition,
                &open,
                vec![NewItem::new(item_body(i, false)).with_id(id.clone())],
            )
            .await?;
        enq.push(t0.elapsed().as_secs_f64() * 1e3);
        match wait_seen(handler, &id, t0).await {
            Some(ms) => lat.push(ms),
            None => missed += 1,
        }
    }
    proc.stop().await;
    summary(lat, enq, missed, parts)
}

/// Milliseconds from `t0` until the handler saw item `id`; None after 15 s.
pub(crate) async fn wait_seen(handler: &Handler, id: &str, t0: Instant) -> Option<f64> {
    let deadline = t0 + Duration::from_secs(15);
    loop {
        if let Some(at) = handler.state.seen(id) {
            return Some(at.saturating_duration_since(t0).as_secs_f64() * 1e3);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The percentiles of pickup latencies `lat` and enqueue calls `enq`, with
/// `partitions` idle partitions held (0: new partitions).
pub(crate) fn summary(
    lat: Vec<f64>,
    enq: Vec<f64>,
    missed: usize,
    partitions: usize,
) -> Result<Pickup> {
    if lat.is_empty() {
        bail!("no item reached the handler within 15 s of its enqueue");
    }
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    let mut es = enq;
    es.sort_by(f64::total_cmp);
    Ok(Pickup {
        partitions,
        processors: 1,
        via: "library enqueue".into(),
        samples: lat.len(),
        p50_ms: percentile(&sorted, 50.0),
        p99_ms: percentile(&sorted, 99.0),
        max_ms: sorted[sorted.len() - 1],
        mean_ms: lat.iter().sum::<f64>() / lat.len() as f64,
        enqueue_p50_ms: percentile(&es, 50.0),
        latencies_ms: lat,
        missed,
        statements_per_sample: None,
    })
}

/// Idle cost: one processor holding many idle partitions; statements per
/// second once they are all held, and resident memory.
pub(crate) async fn idle(db: &Db, args: &Args, handler: &Handler) -> Result<Idle> {
    let n = args.idle_partitions;
    idle_partitions(db, n).await?;
    let client = reqwest::Client::new();
    let mut proc = Proc::spawn(&db.url, &handler.url(), &[])?;
    let wait = Duration::from_secs(args.timeout);
    let held = wait_held(db, &mut [&mut proc], n, wait).await?;
    let hold_s = proc.spawned.elapsed().as_secs_f64();
    if held < n {
        eprintln!(
            "  warning: only {held} of {n} idle partitions held after {} s; measuring anyway",
            args.timeout
        );
    }
    // Per second: statements, then database and processor CPU ticks.
    let (mut series, mut ticks) = (Vec::new(), Vec::new());
    let start = Instant::now();
    for k in 0..=args.idle_observe {
        tokio::time::sleep_until((start + Duration::from_secs(k)).into()).await;
        proc.check_alive()?;
        series.push(proc.outcomes(&client).await.statements);
        ticks.push((database_ticks(), pid_ticks(proc.child.id())));
    }
    let (rss, hwm) = proc.memory();
    proc.stop().await;
    let w = args.idle_window.min(args.idle_observe) as usize;
    let last = series[series.len() - 1];
    let before = series[series.len() - 1 - w];
    let ((db1, p1), (db0, p0)) = (ticks[ticks.len() - 1], ticks[ticks.len() - 1 - w]);
    let share = |a: u64, b: u64| (a - b) as f64 / clk_tck() / w as f64;
    // Without a database server (SQLite), the database's share is the processor's.
    let database_cpu_share = (db.backend != Backend::Sqlite).then(|| share(db1, db0));
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
        database_cpu_share,
        processor_cpu_share: Some(share(p1, p0)),
    })
}

// ---------------------------------------------------------------- driver
