//! Races made deterministic with a row lock held by the test: the fence
//! holds at commit, producers never strand work, two producers may create
//! one partition at once.

use std::time::Duration;

use feed::store::{NewItem, PartitionSpec, RetryScope};
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;

use crate::fencing::{TwoProcessors, two_processors};
use crate::on_all_backends;
use crate::support::{Backend, TestDb, metric, wait_for};

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
        .execute_raw(feed::store::statement(
            db.store.backend(),
            "UPDATE feed_partitions SET owner = ?, version = version + 1 WHERE id = 'p' AND owner = ?",
            vec![b_session.clone().into(), a_session.clone().into()],
        ))
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(moved, 1, "A held the partition");
    release_a.send(true).unwrap();
    // A's write, as each backend locks the partition row for it.
    let locking = if db.backend == Backend::Postgres {
        "FOR SHARE"
    } else {
        "LOCK IN SHARE MODE"
    };
    if db.backend != Backend::Sqlite {
        wait_for(
            "A's write waiting for the lock",
            Duration::from_secs(30),
            || async { db.lock_waits(locking).await >= 1 },
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
    txn.execute_raw(feed::store::statement(
        db.store.backend(),
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
    let r = db.store.retry_failed(RetryScope::Item("f")).await.unwrap();
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
