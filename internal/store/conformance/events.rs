//! Completion events: written by Feed's statements exactly when a
//! partition closes, fails or is cancelled (and, opted in, when its gate
//! moves), never for a change that did not happen; delivered in order per
//! partition, with stored attempts and backoff.

use std::time::Duration;

use super::{Kit, conformance};
use crate::status::Status;
use crate::store::HeldPartition;
use crate::store::events::{Counts, EventScope};

conformance!(
    closes_failures_and_cancels_write_one_event_each,
    a_lost_close_writes_nothing,
    gate_events_are_opt_in,
    delivery_is_in_order_per_partition_with_backoff,
);

fn held(id: &str, version: i64) -> HeldPartition {
    HeldPartition {
        id: id.into(),
        gate: 0,
        version,
        auto_close: true,
        manual_checkpoint: false,
    }
}

/// Every event as (partition, kind, gate, counts), oldest first.
async fn events(k: &Kit) -> Vec<(String, String, i64, Counts)> {
    k.store
        .events(None, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.partition_id, e.kind, e.gate, e.counts))
        .collect()
}

fn counts(available: i64, complete: i64, failed: i64, cancelled: i64) -> Counts {
    Counts {
        available,
        complete,
        failed,
        cancelled,
    }
}

async fn closes_failures_and_cancels_write_one_event_each(k: Kit) {
    k.session("me").await;
    for id in ["closed", "finished", "failed", "cancelled", "by-hand"] {
        k.partition(id, Some("me")).await;
    }
    k.items(&[
        ("c1", "closed", 0, "complete"),
        ("c2", "closed", 0, "complete"),
        ("c3", "closed", 0, "cancelled"),
        ("f1", "finished", 0, "complete"),
        ("x1", "failed", 0, "failed"),
        ("x2", "failed", 0, "available"),
        ("k1", "cancelled", 0, "available"),
        ("k2", "cancelled", 0, "available"),
        ("k3", "cancelled", 0, "complete"),
    ])
    .await;
    let me = "me".into();
    let closed = k.store.close_partitions(&[held("closed", 0)], &me).await;
    assert_eq!(closed.unwrap().len(), 1);
    let closed = k.store.close_finished(&[("finished".into(), 0)], &me).await;
    assert_eq!(closed.unwrap().len(), 1);
    assert!(
        k.store
            .fail_partition(&held("failed", 0), &me)
            .await
            .unwrap()
    );
    assert_eq!(k.store.cancel("cancelled").await.unwrap(), 2);
    // Feed's statements write events, not a trigger: plain SQL writes none.
    k.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'by-hand'")
        .await;
    let complete = "partition.complete".to_string();
    assert_eq!(
        events(&k).await,
        [
            ("closed".into(), complete.clone(), 0, counts(0, 2, 0, 1)),
            ("finished".into(), complete.clone(), 0, counts(0, 1, 0, 0)),
            (
                "failed".into(),
                "partition.failed".into(),
                0,
                counts(1, 0, 1, 0)
            ),
            (
                "cancelled".into(),
                "partition.cancelled".into(),
                0,
                counts(0, 1, 0, 2)
            ),
        ],
        "one event per change, with the items as the change left them"
    );
    // Changes that are not closes write nothing: a cancel repeated, a
    // lease, a retry reopening a failed partition, a reopening enqueue.
    assert_eq!(k.store.cancel("cancelled").await.unwrap(), 0);
    k.sqls(&[
        "UPDATE feed_partitions SET owner = NULL, version = version + 1",
        "UPDATE feed_partitions SET status = 'available' WHERE id = 'closed'",
    ])
    .await;
    k.store
        .retry_failed(crate::store::RetryScope::Partition("failed"))
        .await
        .unwrap();
    assert_eq!(events(&k).await.len(), 5);
    let e = &k.store.events(Some("closed"), None, 10).await.unwrap()[0];
    assert_eq!((e.status.as_str(), e.attempts), ("pending", 0));
}

async fn a_lost_close_writes_nothing(k: Kit) {
    k.session("me").await;
    k.partition("p", Some("me")).await;
    k.item("done", "p", 0, "complete").await;
    // The gate check read version 0 and found nothing left; a producer
    // adds an item before the close commits.
    let read = held("p", 0);
    let spec = crate::store::PartitionSpec::default();
    let item = crate::store::NewItem::new(b"{}".to_vec()).with_id("late");
    k.store.enqueue("p", &spec, vec![item]).await.unwrap();
    let me = "me".into();
    assert!(
        k.store
            .close_partitions(std::slice::from_ref(&read), &me)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        k.store
            .close_finished(&[("p".into(), 0)], &me)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(k.partition_row("p").await.0, "available");
    assert!(
        events(&k).await.is_empty(),
        "no event for a close that lost"
    );
    // Once the late item is done, the next close writes the one event.
    k.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'late'")
        .await;
    let version = k.partition_row("p").await.2;
    let closed = k.store.close_partitions(&[held("p", version)], &me).await;
    assert_eq!(closed.unwrap().len(), 1);
    assert_eq!(
        events(&k).await,
        [(
            "p".into(),
            "partition.complete".into(),
            0,
            counts(0, 2, 0, 0)
        )]
    );
}

async fn gate_events_are_opt_in(k: Kit) {
    k.session("me").await;
    k.partition("quiet", Some("me")).await;
    k.partition("loud", Some("me")).await;
    k.sql("UPDATE feed_partitions SET gate_events = TRUE WHERE id = 'loud'")
        .await;
    k.items(&[
        ("q1", "quiet", 0, "complete"),
        ("q2", "quiet", 3, "available"),
        ("l1", "loud", 0, "complete"),
        ("l2", "loud", 3, "available"),
    ])
    .await;
    let me = "me".into();
    assert!(
        k.store
            .advance_gate(&held("quiet", 0), &me, 3)
            .await
            .unwrap()
    );
    assert!(
        k.store
            .advance_gate(&held("loud", 0), &me, 3)
            .await
            .unwrap()
    );
    assert_eq!(
        events(&k).await,
        [(
            "loud".into(),
            "partition.gate".into(),
            3,
            counts(1, 1, 0, 0)
        )]
    );
}

async fn delivery_is_in_order_per_partition_with_backoff(k: Kit) {
    for id in ["a", "b"] {
        k.partition(id, None).await;
    }
    // a closes, reopens and closes again: two events; then b ends.
    k.event("a", Status::Complete).await;
    k.event("a", Status::Complete).await;
    k.event("b", Status::Cancelled).await;
    let ids = |v: Vec<crate::store::events::Event>| v.iter().map(|e| e.id).collect::<Vec<_>>();
    let all = ids(k.store.events(None, None, 10).await.unwrap());
    let [a1, a2, b1] = all[..] else {
        panic!("three events: {all:?}")
    };
    assert_eq!(
        ids(k.store.deliverable(10).await.unwrap()),
        [a1, b1],
        "a's second event waits for its first"
    );
    // a1 fails with a backoff: a2 still waits, and a1 is not due yet.
    let hour = Some(Duration::from_secs(3600));
    k.store.event_attempt_failed(a1, "503", hour).await.unwrap();
    assert_eq!(ids(k.store.deliverable(10).await.unwrap()), [b1]);
    k.store.events_delivered(&[b1]).await.unwrap();
    assert_eq!(k.store.event_backlog(None).await.unwrap(), (2, 0));
    // a1 gives up: it is kept as failed, and a2 may go.
    k.store
        .event_attempt_failed(a1, "410 Gone", None)
        .await
        .unwrap();
    assert_eq!(ids(k.store.deliverable(10).await.unwrap()), [a2]);
    let failed = k.store.events(None, Some("failed"), 10).await.unwrap();
    assert_eq!(
        (
            failed[0].id,
            failed[0].attempts,
            failed[0].last_error.as_deref()
        ),
        (a1, 2, Some("410 Gone"))
    );
    assert_eq!(k.store.event_backlog(None).await.unwrap(), (1, 1));
    // A retry puts it back with fresh attempts, ahead of a2 again.
    assert_eq!(
        k.store.retry_events(EventScope::Event(a1)).await.unwrap(),
        1
    );
    assert_eq!(k.store.retry_events(EventScope::All).await.unwrap(), 0);
    assert_eq!(ids(k.store.deliverable(10).await.unwrap()), [a1]);
    assert!(k.store.events(None, Some("weird"), 1).await.is_err());
}
