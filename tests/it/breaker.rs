//! The circuit breaker: a handler that answers 503 for a while (behind a
//! load balancer, say) makes dispatch hold off and probe rather than burn
//! every item's attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::Value;

use crate::behaviour;
use crate::support::{Scene, TestDb, done, metric, wait_for};

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
    let scene = Scene::start(&db, &[], move |_| {
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
    let Scene(handler, proc) = &scene;
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
