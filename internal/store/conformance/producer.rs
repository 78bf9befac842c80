//! Producer rules: an enqueue is one transaction (all or nothing), items
//! default to the partition's gate and may not go below it, adding to a
//! complete partition reopens it, and a retry bumps the version of every
//! partition it touches so that no decision made before it can pass.

use super::{Kit, conformance};
use crate::Error;
use crate::store::{NewItem, OnFailure, PartitionSpec, RetryScope};
use std::time::Duration;

conformance!(
    enqueue_creates_extends_and_reopens,
    a_refused_enqueue_writes_nothing,
    retry_puts_failed_items_back_at_the_current_gate,
    scheduled_items_store_their_time,
);

fn item(id: &str, gate: Option<i64>) -> NewItem {
    NewItem {
        id: Some(id.into()),
        gate,
        data: bytes::Bytes::from_static(br#"{"n":1}"#),
        schedule: None,
        traceparent: None,
        generated: false,
        parent: None,
    }
}

async fn enqueue_creates_extends_and_reopens(k: Kit) {
    let spec = PartitionSpec {
        auto_close: false,
        manual_checkpoint: true,
        on_failure: OnFailure::Continue,
        gate_events: true,
        ..PartitionSpec::default()
    };
    let r = k
        .store
        .enqueue("p", &spec, vec![item("a", None), item("b", Some(4))])
        .await
        .unwrap();
    assert_eq!((r.items, r.created, r.reopened), (2, true, false));
    let settings: Vec<(bool, bool, String, bool)> = k
        .rows(
            "SELECT auto_close, manual_checkpoint, on_failure, gate_events FROM feed_partitions \
             WHERE id = 'p'",
            &[
                "auto_close",
                "manual_checkpoint",
                "on_failure",
                "gate_events",
            ],
        )
        .await;
    assert_eq!(settings, [(false, true, "continue".to_string(), true)]);
    assert_eq!(k.item_row("b").await, ("available".into(), 4, 0, 0));
    // The spec applies only when the partition is created.
    k.sql("UPDATE feed_partitions SET gate = 2, status = 'complete' WHERE id = 'p'")
        .await;
    let before = k.partition_row("p").await.2;
    let r = k
        .store
        .enqueue("p", &PartitionSpec::default(), vec![item("c", None)])
        .await
        .unwrap();
    assert_eq!((r.items, r.created, r.reopened), (1, false, true));
    assert_eq!(k.item_row("c").await.1, 2, "the partition's current gate");
    let (status, gate, version, _) = k.partition_row("p").await;
    assert_eq!((status.as_str(), gate), ("available", 2));
    assert!(version > before, "adding items bumps the version");
    assert_eq!(k.store.item_data(None, "c").await.unwrap(), br#"{"n":1}"#);
    // An id may be left to Feed.
    let anon = NewItem {
        id: None,
        gate: None,
        data: bytes::Bytes::from_static(b"{}"),
        schedule: None,
        traceparent: None,
        generated: false,
        parent: None,
    };
    assert_eq!(
        k.store
            .enqueue("p", &PartitionSpec::default(), vec![anon])
            .await
            .unwrap()
            .items,
        1
    );
}

async fn a_refused_enqueue_writes_nothing(k: Kit) {
    k.store
        .enqueue("p", &PartitionSpec::default(), vec![item("a", None)])
        .await
        .unwrap();
    k.sql("UPDATE feed_partitions SET gate = 3").await;
    let before = k.partition_row("p").await;
    let below = k
        .store
        .enqueue(
            "p",
            &PartitionSpec::default(),
            vec![item("b", Some(3)), item("c", Some(2))],
        )
        .await;
    assert!(
        matches!(&below, Err(Error::Invalid(m)) if m.contains("item c has gate 2, below partition p's current gate 3")),
        "{below:?}"
    );
    // An id the partition has, or one given twice in a new partition.
    for (p, ids) in [("p", ["d", "a"]), ("q", ["d", "d"])] {
        let items = ids.iter().map(|id| item(id, None)).collect();
        let taken = k.store.enqueue(p, &PartitionSpec::default(), items).await;
        assert!(
            matches!(&taken, Err(Error::Invalid(m)) if m.contains("already exists in this partition")),
            "{p}: {taken:?}"
        );
    }
    let bad = k.store.enqueue("", &PartitionSpec::default(), vec![]).await;
    assert!(matches!(bad, Err(Error::Invalid(_))), "{bad:?}");
    assert_eq!(k.ids("SELECT id FROM feed_items ORDER BY id").await, ["a"]);
    assert_eq!(k.ids("SELECT id FROM feed_partitions").await, ["p"]);
    assert_eq!(k.partition_row("p").await, before);
}

async fn retry_puts_failed_items_back_at_the_current_gate(k: Kit) {
    for p in ["p", "c"] {
        k.partition(p, None).await;
    }
    k.sqls(&[
        "UPDATE feed_partitions SET gate = 2, status = 'failed' WHERE id = 'p'",
        "UPDATE feed_partitions SET status = 'cancelled' WHERE id = 'c'",
    ])
    .await;
    k.items(&[
        ("old", "p", 1, "failed"),
        ("now", "p", 2, "failed"),
        ("done", "p", 2, "complete"),
        ("kept", "c", 0, "failed"),
    ])
    .await;
    k.sql("UPDATE feed_items SET attempts = 5, last_error = 'boom' WHERE status = 'failed'")
        .await;
    let r = k
        .store
        .retry_failed(RetryScope::Item {
            partition: "p",
            id: "now",
        })
        .await
        .unwrap();
    assert_eq!((r.items, r.moved), (1, 0));
    assert_eq!(k.partition_row("p").await, ("available".into(), 2, 1, None));
    let r = k.store.retry_failed(RetryScope::All).await.unwrap();
    assert_eq!((r.items, r.moved), (1, 1));
    assert_eq!(k.item_row("old").await, ("available".into(), 2, 1, 0));
    let (note,): (String,) = k
        .rows(
            "SELECT last_error FROM feed_items WHERE id = 'old'",
            &["last_error"],
        )
        .await
        .remove(0);
    assert!(
        note.contains("moved up from gate 1") && note.ends_with("boom"),
        "{note}"
    );
    assert_eq!(
        k.partition_row("p").await.2,
        2,
        "each retry bumps the version"
    );
    assert_eq!(
        k.item_row("kept").await.0,
        "failed",
        "cancelled partitions stay"
    );
    assert_eq!(k.partition_row("c").await.0, "cancelled");
}

/// A time is stored as given; a delay is added to the database's clock as
/// the row is written; an item without either has none, in the same
/// statement; a time out of range writes nothing.
async fn scheduled_items_store_their_time(k: Kit) {
    let at = 1_893_488_400_000; // 2030-01-01T09:00:00Z
    let items = vec![
        item("at", None).not_before(at),
        item("after", None).delay(Duration::from_secs(600)),
        item("now", None),
    ];
    let before = k.store.now_ms().await.unwrap();
    let spec = PartitionSpec::default();
    k.store.enqueue("p", &spec, items).await.unwrap();
    let after = k.store.now_ms().await.unwrap();
    let times: Vec<(String, Option<i64>)> = k
        .rows(
            "SELECT id, not_before FROM feed_items ORDER BY id",
            &["id", "not_before"],
        )
        .await;
    assert_eq!(times[0], ("after".into(), times[0].1));
    let delayed = times[0].1.expect("a delay is stored as a time");
    assert!(
        (before + 600_000..=after + 600_000).contains(&delayed),
        "{before} + 10 min <= {delayed} <= {after} + 10 min"
    );
    assert_eq!(times[1..], [("at".into(), Some(at)), ("now".into(), None)]);
    let e = k
        .store
        .enqueue(
            "p",
            &spec,
            vec![item("bad", None).not_before(1_893_488_400)],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Invalid(m) if m.contains("looks like seconds")),
        "{e}"
    );
    assert_eq!(
        k.rows::<(String,)>("SELECT id FROM feed_items WHERE id = 'bad'", &["id"])
            .await
            .len(),
        0
    );
}
