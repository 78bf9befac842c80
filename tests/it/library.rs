//! The library API: enqueue in a transaction, an in-process `Handler`,
//! status and retry, without HTTP.

use std::sync::Arc;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use feed::{Child, Config, Handler, Job, Outcome};

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

/// Item `n` spawns `n` children of `n - 1`: a tree in one partition.
struct Tree;

#[async_trait::async_trait]
impl Handler for Tree {
    async fn handle(&self, job: &Job) -> Outcome {
        let n: u32 = serde_json::from_slice(&job.data).unwrap_or(0);
        let children = (0..n)
            .map(|_| Child::new((n - 1).to_string().into_bytes()))
            .collect();
        Outcome::done().spawning(children)
    }
}

/// Runs `handler` in process until partition `p` completes.
async fn run_until_complete(db: &TestDb, handler: Arc<dyn Handler>, p: &str) {
    let mut config = Config::new(db.url.clone(), "http://unused.invalid/");
    config.dispatch.poll_interval = Duration::from_millis(50);
    config.leases.acquire_interval = Duration::from_millis(100);
    let stop = Arc::new(tokio::sync::Notify::new());
    let s = stop.clone();
    let run = tokio::spawn(feed::run_with(config, handler, async move {
        s.notified().await
    }));
    db.wait_partition(p, "complete").await;
    stop.notify_one();
    run.await.unwrap().unwrap();
}

backend_tests!(an_in_process_handler_spawns_items: sqlite => Sqlite);
/// `Outcome::spawning`: the root (3) spawns three 2s, each two 1s, each
/// one 0: 16 items, every one run once.
async fn an_in_process_handler_spawns_items(db: TestDb) {
    let root = NewItem::new(b"3".to_vec()).with_id("root");
    db.store
        .enqueue("tree", &PartitionSpec::default(), vec![root])
        .await
        .unwrap();
    run_until_complete(&db, Arc::new(Tree), "tree").await;
    let complete = db
        .count("SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = 'tree' AND status = 'complete'")
        .await;
    assert_eq!(complete, 16);
    let leaves = db
        .count("SELECT COUNT(*) AS n FROM feed_items WHERE CAST(data AS TEXT) = '0'")
        .await;
    assert_eq!(leaves, 6);
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
    run_until_complete(&db, Arc::new(Doubler), "lib").await;
    let st = db.store.status(Some("lib")).await.unwrap();
    assert_eq!(
        st.partitions[0].gate, 1,
        "done items at gate 2 do not move the partition"
    );
    assert_eq!(st.failed_items.len(), 1);
    assert_eq!(
        String::from_utf8(db.store.item_data(None, "n3").await.unwrap()).unwrap(),
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
