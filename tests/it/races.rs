//! Races made deterministic with a row lock held by the test: the fence
//! holds at commit, producers never strand work, two producers may create
//! one partition at once.

use std::time::Duration;

use feed::store::{NewItem, PartitionSpec, RetryScope};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;

use crate::fencing::{TwoProcessors, two_processors};
use crate::support::{Backend, InProcess, TestDb, done, metric, wait_for};
use crate::{on_all_backends, on_network_backends};

on_all_backends!(fence_holds_at_commit);
/// A holds the partition and its call is answered while the test, in an
/// open transaction, has already moved the lease to B. A's write must wait
/// for that transaction (observed as a lock wait on PostgreSQL and MariaDB)
/// and then see B as the owner: A's result is rejected, B's is stored once.
async fn fence_holds_at_commit(db: TestDb) {
    let TwoProcessors {
        handler: _h,
        a,
        b: _b,
        a_session,
        b_session,
        release_a,
        release_b,
    } = two_processors(&db).await;

    // The lease change, uncommitted: its row lock is held.
    let txn = db.store.connection().begin().await.unwrap();
    let moved = txn
        .execute_raw(testkit::statement(
            db.store.driver(),
            "UPDATE feed_partitions SET owner = ?, version = version + 1 WHERE id = 'p' AND owner = ?",
            vec![b_session.clone().into(), a_session.clone().into()],
        ))
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(moved, 1, "A held the partition");
    release_a.send(true).unwrap();
    // A's write, as each backend locks the partition row for it.
    if db.backend != Backend::Sqlite {
        wait_for(
            "A's write waiting for the lock",
            Duration::from_secs(30),
            || async { db.lock_waits(db.result_lock()).await >= 1 },
        )
        .await;
    }
    txn.commit().await.unwrap();

    wait_for("A's rejection", Duration::from_secs(30), || async {
        metric(&a.metrics().await, "feed_items_total{outcome=\"rejected\"}") >= 1.0
    })
    .await;
    let row = db.item_row("x").await;
    assert_eq!((row.status.as_str(), row.version), ("available", 0));
    release_b.send(true).unwrap();
    db.wait_partition("p", "complete").await;
    let row = db.item_row("x").await;
    assert_eq!(row.data, json!({"by": b_session}));
    assert_eq!(row.version, 1, "exactly one result was written");
}

on_all_backends!(two_producers_create_one_partition);
/// A producer's transaction has inserted partition `p` and not committed;
/// a second producer enqueues into `p` meanwhile. Both succeed.
async fn two_producers_create_one_partition(db: TestDb) {
    let txn = db.store.connection().begin().await.unwrap();
    txn.execute_raw(testkit::statement(
        db.store.driver(),
        "INSERT INTO feed_partitions (id) VALUES ('p')",
        vec![],
    ))
    .await
    .unwrap();
    let store = db.store.clone();
    let second = tokio::spawn(async move {
        let item = NewItem::new(b"{}".to_vec()).with_id("i");
        store
            .enqueue("p", &PartitionSpec::default(), vec![item])
            .await
    });
    if db.backend != Backend::Sqlite {
        wait_for(
            "the second producer waiting",
            Duration::from_secs(30),
            || async { db.lock_waits("INSERT INTO feed_partitions").await >= 1 },
        )
        .await;
    }
    txn.commit().await.unwrap();
    let r = second.await.unwrap().expect("the second producer succeeds");
    assert!(!r.created && r.items == 1, "{r:?}");
    assert_eq!(db.item_row("i").await.status, "available");
}

on_all_backends!(retry_bumps_the_partition_version);
/// `retry` bumps the version of an `available` partition too, so that an
/// advance or close decided before it fails its OCC check.
async fn retry_bumps_the_partition_version(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["f", "a"])
        .await;
    db.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'f'")
        .await;
    let before = version(&db).await;
    let r = db
        .store
        .retry_failed(RetryScope::Item {
            partition: "p",
            id: "f",
        })
        .await
        .unwrap();
    assert_eq!((r.items, r.moved), (1, 0));
    assert_eq!(version(&db).await, before + 1);
    assert_eq!(db.item_row("f").await.status, "available");
}

async fn version(db: &TestDb) -> i64 {
    db.query("SELECT version FROM feed_partitions WHERE id = 'p'", vec![])
        .await[0]
        .try_get::<i64>("", "version")
        .unwrap()
}

on_network_backends!(a_result_stuck_on_a_lock_holds_back_no_other);
/// Results are written one batch at a time, each batch forming while the
/// previous one is in the database. The test holds the row lock of
/// partition `slow` when its item's result is written, so that write
/// waits (observed as a lock wait); the other partition's items, answered
/// only then, are still written and their partition closes while the lock
/// is held. Then the lock goes and `slow` completes too.
async fn a_result_stuck_on_a_lock_holds_back_no_other(db: TestDb) {
    db.partition_of("slow", true, false, "block", &["s"]).await;
    db.partition_of("fast", true, false, "block", &["f1", "f2", "f3"])
        .await;
    let (called, mut slow_called) = tokio::sync::watch::channel(false);
    let (go_slow, answer_slow) = tokio::sync::watch::channel(false);
    let (go_fast, answer_fast) = tokio::sync::watch::channel(false);
    let _scene = InProcess::start_async(&db, move |call| {
        let (called, mut answer) = if call.item == "s" {
            (Some(called.clone()), answer_slow.clone())
        } else {
            (None, answer_fast.clone())
        };
        async move {
            if let Some(called) = called {
                let _ = called.send(true);
            }
            let _ = answer.wait_for(|go| *go).await;
            done()
        }
    })
    .await;
    slow_called.wait_for(|c| *c).await.unwrap();
    // The partition is leased by now; its row lock is the test's until commit.
    let txn = db
        .holding("SELECT id FROM feed_partitions WHERE id = 'slow' FOR UPDATE")
        .await;
    go_slow.send(true).unwrap();
    wait_for(
        "the slow result waiting for the lock",
        Duration::from_secs(30),
        || async { db.lock_waits(db.result_lock()).await >= 1 },
    )
    .await;
    go_fast.send(true).unwrap();
    wait_for(
        "the other partition complete while the lock is held",
        Duration::from_secs(20),
        || async { db.partition_status("fast").await == "complete" },
    )
    .await;
    assert_eq!(
        db.item_row("s").await.status,
        "available",
        "the slow result still waits"
    );
    txn.commit().await.unwrap();
    db.wait_partition("slow", "complete").await;
}
