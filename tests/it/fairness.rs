//! Fairness and order: ready work is shared across partitions, so small
//! partitions are not behind a big one or one that never finishes; within
//! a partition's gate items run in the order they were written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use parking_lot::Mutex;
use serde_json::json;

use crate::on_all_backends;
use crate::support::{Handler, Proc, Spawned, TestDb, done, json as reply, wait_for};

async fn enqueue(db: &TestDb, partition: &str, ids: impl Iterator<Item = String>) {
    let items: Vec<NewItem> = ids
        .map(|id| NewItem::new(b"{}".to_vec()).with_id(id))
        .collect();
    db.store
        .enqueue(partition, &PartitionSpec::default(), items)
        .await
        .unwrap();
}

/// Partitions s0, s1, … of `n` items each (s0-0, s0-1, …).
async fn small_partitions(db: &TestDb, n: usize) {
    for s in 0..n {
        enqueue(
            db,
            &format!("s{s}"),
            (0..n).map(move |i| format!("s{s}-{i}")),
        )
        .await;
    }
}

async fn available(db: &TestDb, partition: &str) -> i64 {
    db.query(
        "SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = ? AND status = 'available'",
        vec![partition.into()],
    )
    .await[0]
        .try_get("", "n")
        .unwrap()
}

on_all_backends!(small_partitions_are_not_behind_a_big_one);
/// One partition of 5,000 items (named to sort first) and ten of 10: the
/// ten complete while most of the big one is still waiting.
async fn small_partitions_are_not_behind_a_big_one(db: TestDb) {
    enqueue(&db, "a-big", (0..5000).map(|i| format!("big-{i:05}"))).await;
    small_partitions(&db, 10).await;
    let Spawned(_h, _p) = Spawned::start(&db, &["--concurrency", "8"], |_| done()).await;
    for s in 0..10 {
        db.wait_partition(&format!("s{s}"), "complete").await;
    }
    let left = available(&db, "a-big").await;
    assert!(
        left > 4000,
        "the small partitions finished only after {} of the big one's 5,000 items",
        5000 - left
    );
}

on_all_backends!(items_run_in_the_order_they_were_written);
/// Ids sort in the opposite order to the order they were written: with one
/// item in flight at a time they are called in the order written.
async fn items_run_in_the_order_they_were_written(db: TestDb) {
    let ids: Vec<String> = (0..30).rev().map(|i| format!("item-{i:02}")).collect();
    // Written in three transactions, to order across them too.
    for chunk in ids.chunks(10) {
        enqueue(&db, "p", chunk.iter().cloned()).await;
    }
    let Spawned(h, _p) = Spawned::start(&db, &["--concurrency", "1"], |_| done()).await;
    db.wait_partition("p", "complete").await;
    let called: Vec<String> = h.calls().into_iter().map(|c| c.item).collect();
    assert_eq!(called, ids);
}

on_all_backends!(a_step_or_a_retry_runs_again_before_later_items);
/// A refill reads a partition after the last item it read, not from the
/// start; an item that is ready again (another step at the same gate, a
/// retry once its backoff ends) must still come back promptly, not when the
/// partition's later items run out. With `--poll-interval 30s` (so the
/// periodic full read cannot be what brings them back), 2,000 items in one
/// partition: `w0000` answers `done: false` once and `w0001` 500 once
/// (backoff 50 ms); both are called again before `w1000`.
async fn a_step_or_a_retry_runs_again_before_later_items(db: TestDb) {
    enqueue(&db, "p", (0..2000).map(|i| format!("w{i:04}"))).await;
    let seen: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let Spawned(h, _p) = Spawned::start(
        &db,
        &[
            "--concurrency",
            "4",
            "--poll-interval",
            "30s",
            "--backoff-base",
            "50ms",
        ],
        move |c| {
            let first = seen.lock().insert(c.item.clone());
            match c.item.as_str() {
                "w0000" if first => reply(200, json!({"done": false})),
                "w0001" if first => reply(500, json!({"error": "once"})),
                _ => done(),
            }
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    let order: Vec<String> = h.calls().into_iter().map(|c| c.item).collect();
    let at = |item: &str, nth: usize| {
        order
            .iter()
            .enumerate()
            .filter(|(_, i)| *i == item)
            .nth(nth)
            .map(|(k, _)| k)
            .unwrap_or_else(|| panic!("{item} called fewer than {} times", nth + 1))
    };
    let half = at("w1000", 0);
    for item in ["w0000", "w0001"] {
        let again = at(item, 1);
        assert!(
            again < half,
            "{item} was called again as call {again}, after w1000 (call {half})"
        );
    }
    assert_eq!(order.len(), 2002, "every item once, the two twice");
}

on_all_backends!(an_endless_partition_does_not_starve_others);
/// One partition's 200 items answer `done: false` forever (a state machine
/// that never ends); five small partitions must still finish, and with
/// `--max-in-flight-per-partition 2` no partition ever has more than two
/// calls in flight.
async fn an_endless_partition_does_not_starve_others(db: TestDb) {
    enqueue(&db, "a-endless", (0..200).map(|i| format!("e{i:03}"))).await;
    small_partitions(&db, 5).await;
    let in_flight: Arc<Mutex<HashMap<String, (usize, usize)>>> = Arc::default();
    let f = in_flight.clone();
    let h = Handler::start_async(move |c| {
        let f = f.clone();
        async move {
            {
                let mut m = f.lock();
                let e = m.entry(c.partition.clone()).or_default();
                e.0 += 1;
                e.1 = e.1.max(e.0);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            f.lock().get_mut(&c.partition).unwrap().0 -= 1;
            let done = c.partition != "a-endless";
            reply(200, json!({"done": done}))
        }
    })
    .await;
    let _p = Proc::start(
        &db,
        &h.url(),
        &["--concurrency", "8", "--max-in-flight-per-partition", "2"],
    );
    for s in 0..5 {
        db.wait_partition(&format!("s{s}"), "complete").await;
    }
    wait_for(
        "the endless partition still running",
        Duration::from_secs(10),
        || async {
            h.calls()
                .iter()
                .filter(|c| c.partition == "a-endless")
                .count()
                > 20
        },
    )
    .await;
    let peaks = in_flight.lock().clone();
    for (partition, (_, peak)) in peaks {
        assert!(peak <= 2, "{partition} had {peak} calls in flight at once");
    }
}
