//! The circuit breaker: a handler that answers 503 for a while (behind a
//! load balancer, say) makes dispatch hold off and probe rather than burn
//! every item's attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::Value;

use crate::support::{Spawned, TestDb, done, metric, numbered, wait_for};
use crate::{behaviour, on_all_backends};

/// Items, in 30 partitions.
const ITEMS: usize = 3_000;
/// How long the handler answers 503.
const OUTAGE: Duration = Duration::from_secs(20);

behaviour!(a_503_outage_fails_nothing);
/// The handler goes down (503) after 300 calls and comes back 20 s later:
/// the breaker opens (metric, `/readyz`), no item fails, fewer than 1 % of
/// the items lose an attempt, and work resumes within one probe interval
/// (10 s at most) of the recovery.
async fn a_503_outage_fails_nothing(db: TestDb) {
    for p in 0..30 {
        let ids: Vec<String> = (0..ITEMS / 30).map(|i| format!("p{p}/{i}")).collect();
        db.partition_of(&format!("p{p}"), true, false, "block", &ids)
            .await;
    }
    let (calls, down) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (c, d) = (calls.clone(), down.clone());
    let scene = Spawned::start(&db, &[], move |_| {
        if c.fetch_add(1, Ordering::SeqCst) == 300 {
            d.store(true, Ordering::SeqCst);
        }
        if d.load(Ordering::SeqCst) {
            (StatusCode::SERVICE_UNAVAILABLE, "upstream down").into_response()
        } else {
            done()
        }
    })
    .await;
    let Spawned(handler, proc) = &scene;
    wait_for("the breaker to open", Duration::from_secs(30), || async {
        metric(&proc.metrics().await, "feed_breaker_open") == 1.0
    })
    .await;
    let ready = format!("http://{}/readyz", proc.listen.as_deref().unwrap());
    let r = reqwest::get(&ready).await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(body["breaker"], "open");
    tokio::time::sleep(OUTAGE).await;
    down.store(false, Ordering::SeqCst);
    let recovered = Instant::now();
    let before = handler.calls().len();
    wait_for(
        "the first call after the recovery",
        Duration::from_secs(15),
        || async { handler.calls().len() > before },
    )
    .await;
    let resumed = recovered.elapsed();
    let all_done = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'";
    wait_for("the drain", Duration::from_secs(60), || async {
        db.count(all_done).await == ITEMS as i64
    })
    .await;
    // Every item is done after one step: attempts beyond the first were burned.
    let burned: i32 = db
        .rows::<(i32,)>(
            "SELECT attempts FROM feed_items WHERE attempts > 1",
            &["attempts"],
        )
        .await
        .iter()
        .map(|(a,)| a - 1)
        .sum();
    let failed = db
        .count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'failed'")
        .await;
    let text = proc.metrics().await;
    eprintln!(
        "outage of {OUTAGE:?}: {burned} attempts burned, {} calls in all, resumed {resumed:?} after the recovery",
        handler.calls().len()
    );
    assert_eq!(failed, 0, "no item failed");
    assert!((burned as usize) * 100 < ITEMS, "{burned} attempts burned");
    assert!(
        resumed < Duration::from_secs(12),
        "resumed after {resumed:?}"
    );
    assert_eq!(metric(&text, "feed_breaker_open"), 0.0, "closed again");
    assert!(metric(&text, "feed_breaker_trips_total") >= 1.0);
}

/// `--concurrency` of the bounded-outage test: below the default (64), so
/// that one more round of calls than the bound allows breaks it.
const CONCURRENCY: usize = 16;
/// `--breaker-calls` (the default).
const WINDOW: usize = 20;
/// Probes the bounded-outage test waits for.
const PROBES: f64 = 3.0;

on_all_backends!(an_outage_costs_a_bounded_number_of_calls);
/// The handler answers 503 to every call, over 500 items: the calls it
/// gets stay within the bound the book states, the calls that open the
/// breaker (half a window, each item counting once), those in flight when
/// it opens (`--concurrency` at most), and one per probe. Counted until
/// the breaker is open and three probes have been made, whatever the
/// machine's speed; no item fails.
async fn an_outage_costs_a_bounded_number_of_calls(db: TestDb) {
    for p in 0..10 {
        let ids = numbered(&format!("p{p}/"), 50);
        db.partition_of(&format!("p{p}"), true, false, "block", &ids)
            .await;
    }
    let concurrency = CONCURRENCY.to_string();
    let window = WINDOW.to_string();
    // No retry comes due during the test: each item fails once before the
    // breaker opens, so half a window of calls opens it.
    let extra = [
        "--concurrency",
        &concurrency,
        "--breaker-calls",
        &window,
        "--backoff-base",
        "1h",
        "--backoff-max",
        "1h",
    ];
    let scene = Spawned::start(&db, &extra, |_| {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream down").into_response()
    })
    .await;
    let Spawned(handler, proc) = &scene;
    wait_for(
        "the breaker to open and probe",
        Duration::from_secs(30),
        || async {
            let text = proc.metrics().await;
            metric(&text, "feed_breaker_open") == 1.0
                && metric(&text, "feed_handler_probes_total") >= PROBES
        },
    )
    .await;
    // Calls first, probes after: every probe among the calls is counted.
    let calls = handler.calls().len();
    let probes = metric(&proc.metrics().await, "feed_handler_probes_total") as usize;
    let bound = WINDOW.div_ceil(2) + CONCURRENCY + probes;
    eprintln!(
        "{:?}: {calls} calls, {probes} probes, bound {bound}",
        db.backend
    );
    assert!(
        calls <= bound,
        "{calls} calls for an outage bounded at {bound} ({probes} probes)\n{}",
        proc.log_tail(40)
    );
    let failed = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'failed'";
    assert_eq!(db.count(failed).await, 0, "no item failed");
}
