//! The library API: enqueue in a transaction, an in-process `Handler`,
//! status and retry, without HTTP.

use std::sync::Arc;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use feed::{Config, Handler, Job, Outcome};

use crate::backend_tests;
use crate::support::TestDb;

struct Doubler;

#[async_trait::async_trait]
impl Handler for Doubler {
    async fn handle(&self, job: &Job) -> Outcome {
        let n: i64 = serde_json::from_slice(&job.data).unwrap_or(0);
        if n < 0 {
            return Outcome::fail("negative");
        }
        let data = (n * 2).to_string().into_bytes();
        Outcome::step(Some(job.gate + 1), job.gate == 1, Some(data.into()))
    }
}

backend_tests!(in_process_processor: sqlite => Sqlite);
async fn in_process_processor(db: TestDb) {
    let items = (0..5)
        .map(|i| NewItem::new(i.to_string().into_bytes()).with_id(format!("n{i}")))
        .chain([NewItem::new(b"-1".to_vec()).with_id("neg")])
        .collect();
    let mut spec = PartitionSpec::default();
    spec.on_failure = feed::store::OnFailure::Continue;
    let r = db.store.enqueue("lib", &spec, items).await.unwrap();
    assert!(r.created && r.items == 6);
    let mut config = Config::new(db.url.clone(), "http://unused.invalid/");
    config.dispatch.poll_interval = Duration::from_millis(50);
    config.leases.acquire_interval = Duration::from_millis(100);
    let stop = Arc::new(tokio::sync::Notify::new());
    let s = stop.clone();
    let run = tokio::spawn(feed::run_with(config, Arc::new(Doubler), async move {
        s.notified().await
    }));
    db.wait_partition("lib", "complete").await;
    stop.notify_one();
    run.await.unwrap().unwrap();
    let st = db.store.status(Some("lib")).await.unwrap();
    assert_eq!(
        st.partitions[0].gate, 1,
        "done items at gate 2 do not move the partition"
    );
    assert_eq!(st.failed_items.len(), 1);
    assert_eq!(
        String::from_utf8(db.store.item_data("n3").await.unwrap()).unwrap(),
        "12"
    );
    assert!(
        st.processors.is_empty(),
        "the session row is deleted at shutdown"
    );
    // Every task has stopped by the time `run_with` returns: the
    // completer's counter made its last write before, not after.
    let counted = db
        .count("SELECT CAST(COALESCE(SUM(items), 0) AS BIGINT) AS n FROM feed_completions")
        .await;
    assert_eq!(counted, 5, "the five completed items are counted");
    let r = db
        .store
        .retry_failed(feed::store::RetryScope::Partition("lib"))
        .await
        .unwrap();
    assert_eq!(r.items, 1);
    assert_eq!(db.partition_status("lib").await, "available");
}
