//! Operator controls: each is one conditional write that says why when it
//! does not apply. A paused partition keeps its lease and dispatches
//! nothing; a cancelled one is released, so late results fail the fence.

use super::{EXPIRY, Kit, conformance};
use crate::Error;
use crate::ids::PartitionId;
use crate::status::PartitionEnd;
use crate::status::Status;
use crate::store::{Ack, Ask, ItemWrite, Written};

conformance!(
    pause_stops_dispatch_and_keeps_the_lease,
    cancel_releases_and_fences_out_late_results,
    checkpoint_says_why_it_refuses,
    retry_says_why_it_refuses,
    an_answer_ends_its_partition_under_the_fence,
);

fn conflict<T: std::fmt::Debug>(r: crate::Result<T>, says: &str) {
    assert!(
        matches!(&r, Err(Error::Conflict(m)) if m.contains(says)),
        "{r:?}"
    );
}

async fn pause_stops_dispatch_and_keeps_the_lease(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.partition("done", None).await;
    k.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'done'")
        .await;
    k.item("x", "p", 0, "available").await;
    let ready = || async {
        let want = [Ask::from((PartitionId::from("p"), 10))];
        k.store
            .ready_items(&"s1".into(), &want)
            .await
            .unwrap()
            .len()
    };
    assert_eq!(ready().await, 1);
    k.store.pause("p").await.unwrap();
    k.store.pause("p").await.unwrap();
    assert_eq!(ready().await, 0, "a paused partition dispatches nothing");
    assert_eq!(
        k.partition_row("p").await.3.as_deref(),
        Some("s1"),
        "the lease is kept"
    );
    conflict(k.store.pause("done").await, "partition done is complete");
    assert!(matches!(
        k.store.pause("nope").await,
        Err(Error::NotFound(_))
    ));
    k.store.resume("p").await.unwrap();
    assert_eq!(ready().await, 1);
    assert_eq!(
        k.store.pause_all().await.unwrap(),
        1,
        "available or failed only"
    );
    assert_eq!(k.store.resume_all().await.unwrap(), 1);
}

async fn cancel_releases_and_fences_out_late_results(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.items(&[
        ("x", "p", 0, "available"),
        ("y", "p", 0, "available"),
        ("z", "p", 0, "complete"),
    ])
    .await;
    let delivered = k
        .store
        .ready_items(&"s1".into(), &[Ask::from(("p".into(), 1))])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(k.store.cancel("p").await.unwrap(), 2);
    assert_eq!(k.partition_row("p").await, ("cancelled".into(), 0, 1, None));
    assert_eq!(k.item_row("z").await.0, "complete");
    let late = Ack {
        fence: delivered.fence,
        session: "s1".into(),
        write: ItemWrite {
            status: Status::Complete,
            gate: 0,
            data: None,
            attempts: 0,
            steps: 0,
            last_error: None,
            delay: None,
            new_step: true,
            ends: None,
            spawned: None,
        },
    };
    assert_eq!(
        k.store.write_results(&[late], EXPIRY).await.unwrap(),
        [Written::Stale]
    );
    assert_eq!(k.item_row("x").await.0, "cancelled");
    assert_eq!(k.store.cancel("p").await.unwrap(), 0, "idempotent");
    conflict(k.store.resume("p").await, "cannot be resumed");
    k.partition("c", None).await;
    k.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'c'")
        .await;
    conflict(k.store.cancel("c").await, "nothing left to cancel");
}

async fn checkpoint_says_why_it_refuses(k: Kit) {
    k.partition("auto", None).await;
    k.partition("m", None).await;
    k.sql("UPDATE feed_partitions SET manual_checkpoint = TRUE WHERE id = 'm'")
        .await;
    k.item("a", "m", 0, "available").await;
    k.item("b", "m", 5, "available").await;
    conflict(
        k.store.checkpoint("auto", 1).await,
        "not a manual_checkpoint partition",
    );
    conflict(
        k.store.checkpoint("m", 0).await,
        "not above partition m's current gate 0",
    );
    conflict(
        k.store.checkpoint("m", 5).await,
        "still has available items below gate 5",
    );
    k.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'a'")
        .await;
    k.store.checkpoint("m", 5).await.unwrap();
    assert_eq!(k.partition_row("m").await, ("available".into(), 5, 1, None));
    assert!(matches!(
        k.store.checkpoint("m", -1).await,
        Err(Error::Invalid(_))
    ));
    k.sql("UPDATE feed_partitions SET status = 'failed' WHERE id = 'm'")
        .await;
    conflict(
        k.store.checkpoint("m", 6).await,
        "only an available partition",
    );
}

async fn retry_says_why_it_refuses(k: Kit) {
    k.partition("p", None).await;
    k.partition("c", None).await;
    k.items(&[
        ("ok", "p", 0, "complete"),
        ("bad", "p", 0, "failed"),
        ("gone", "c", 0, "failed"),
    ])
    .await;
    k.sql("UPDATE feed_partitions SET status = 'cancelled' WHERE id = 'c'")
        .await;
    assert!(matches!(
        k.store.retry_one(None, "nope").await,
        Err(Error::NotFound(_))
    ));
    conflict(
        k.store.retry_one(None, "ok").await,
        "item ok is complete, not failed",
    );
    conflict(
        k.store.retry_one(None, "gone").await,
        "partition is cancelled",
    );
    conflict(
        k.store.retry_partition("c").await,
        "partition c is cancelled",
    );
    assert_eq!(k.store.retry_one(None, "bad").await.unwrap().items, 1);
    assert_eq!(k.store.retry_partition("p").await.unwrap().items, 0);
}

/// A result that ends its partition: refused whole when its fence does
/// not hold (another session owns the partition, or the item changed),
/// and applied once: the rest cancelled, the partition at the end's status.
async fn an_answer_ends_its_partition_under_the_fence(k: Kit) {
    k.session("s1").await;
    k.session("s2").await;
    k.partition("p", Some("s1")).await;
    k.items(&[("x", "p", 0, "available"), ("y", "p", 0, "available")])
        .await;
    let delivered = k
        .store
        .ready_items(&"s1".into(), &[Ask::from(("p".into(), 1))])
        .await
        .unwrap()
        .remove(0);
    let ack = |session: &str| Ack {
        fence: delivered.fence.clone(),
        session: session.into(),
        write: ItemWrite {
            status: Status::Complete,
            gate: 0,
            data: None,
            attempts: 1,
            steps: 0,
            last_error: Some("the handler ended its partition (cancel)".into()),
            delay: None,
            new_step: true,
            ends: Some(PartitionEnd::Cancel),
            spawned: None,
        },
    };
    let store = &k.store;
    let write = |a: Ack| async move { store.write_results(&[a], EXPIRY).await.unwrap() };
    assert_eq!(write(ack("s2")).await, [Written::Stale], "not the owner");
    assert_eq!(k.partition_row("p").await.0, "available");
    assert_eq!(k.item_row("y").await.0, "available");
    assert_eq!(write(ack("s1")).await, [Written::Yes]);
    assert_eq!(k.partition_row("p").await, ("cancelled".into(), 0, 1, None));
    assert_eq!(k.item_row("x").await.0, "complete");
    assert_eq!(k.item_row("y").await.0, "cancelled");
    assert_eq!(write(ack("s1")).await, [Written::Stale], "applied once");
}
