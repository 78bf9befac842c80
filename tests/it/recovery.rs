//! Recovery from a delivery that panicked, and from a handler outage
//! without waiting longer than the outage needs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use feed::store::{NewItem, PartitionSpec};
use feed::{Config, Job, Outcome};

use crate::behaviour;
use crate::support::{DownHandler, TestDb, done, numbered, wait_for};

/// Panics on the first call of item "boom", then succeeds.
struct PanicsOnce(AtomicU32);

#[async_trait::async_trait]
impl feed::Handler for PanicsOnce {
    async fn handle(&self, job: &Job) -> Outcome {
        if job.item_id == "boom" && self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("the handler code had a bug");
        }
        Outcome::done()
    }
}

behaviour!(a_panicked_delivery_is_retried);
/// An in-process handler panics on one delivery: the item leaves the
/// in-flight set, an attempt is recorded, and it completes on the retry.
async fn a_panicked_delivery_is_retried(db: TestDb) {
    let items = ["boom", "calm"]
        .iter()
        .map(|id| NewItem::new(b"{}".to_vec()).with_id(id.to_string()))
        .collect();
    db.store
        .enqueue("p", &PartitionSpec::default(), items)
        .await
        .unwrap();
    let mut config = Config::new(db.url.clone(), "http://unused.invalid/");
    config.dispatch.poll_interval = Duration::from_millis(50);
    config.leases.acquire_interval = Duration::from_millis(100);
    config.retries.backoff_base = Duration::from_millis(50);
    config.retries.backoff_max = Duration::from_millis(100);
    let handler = Arc::new(PanicsOnce(AtomicU32::new(0)));
    let stop = Arc::new(tokio::sync::Notify::new());
    let s = stop.clone();
    let run = tokio::spawn(feed::run_with(config, handler.clone(), async move {
        s.notified().await
    }));
    db.wait_partition("p", "complete").await;
    stop.notify_one();
    run.await.unwrap().unwrap();
    let boom = db.item_row("boom").await;
    assert_eq!((boom.status.as_str(), boom.attempts), ("complete", 2));
    assert_eq!(handler.0.load(Ordering::SeqCst), 2);
}

behaviour!(an_outage_hold_off_starts_at_its_base);
/// The handler is down for about a second while 64 items are in flight:
/// the hold-off starts at its base and doubles per failed probe only, so the
/// first call after the handler is back comes within a few seconds (it
/// used to jump to its 10 s cap at once).
async fn an_outage_hold_off_starts_at_its_base(db: TestDb) {
    db.partition_of("p", true, false, "block", &numbered("i", 100))
        .await;
    let (handler, p) = DownHandler::start(&db, &[]);
    wait_for(
        "the handler found unreachable",
        Duration::from_secs(30),
        || async { p.log().contains("dispatch holds off") },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let up = Instant::now();
    let h = handler.up(|_| done()).await;
    wait_for(
        "the first call after the outage",
        Duration::from_secs(30),
        || async { !h.calls().is_empty() },
    )
    .await;
    let waited = h.calls()[0].at.duration_since(up);
    assert!(
        waited < Duration::from_secs(4),
        "the first call came {waited:?} after the handler was back"
    );
    db.wait_partition("p", "complete").await;
    assert!(
        h.calls().iter().all(|c| c.attempt == 1),
        "no attempt was burned"
    );
}
