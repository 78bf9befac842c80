//! Item keys: an item id is unique within its partition, so two
//! partitions may each have an item `a`; results, retries and lookups
//! tell them apart by partition, and an id alone that names several items
//! is refused with their partitions named.

use super::fence::done;
use super::{EXPIRY, Kit, conformance};
use crate::Error;
use crate::store::{Ack, NewItem, PartitionSpec, Written};

conformance!(
    two_partitions_may_have_an_item_of_the_same_id,
    results_of_items_of_the_same_id_are_fenced_by_partition,
    an_id_alone_finds_its_item_or_names_the_partitions,
);

/// Partitions `p` and `q`, held by the live session `s1`, each with
/// items `a` and `b`, and `p` with `solo`.
async fn twins(k: &Kit) {
    k.session("s1").await;
    for p in ["p", "q"] {
        k.partition(p, Some("s1")).await;
        k.items(&[("a", p, 0, "available"), ("b", p, 0, "available")])
            .await;
    }
    k.item("solo", "p", 0, "available").await;
}

/// (partition, status, version) of every item `id`, by partition.
async fn rows_of(k: &Kit, id: &str) -> Vec<(String, String, i64)> {
    k.rows(
        &format!("SELECT partition_id, status, version FROM feed_items WHERE id = '{id}' ORDER BY partition_id"),
        &["partition_id", "status", "version"],
    )
    .await
}

async fn two_partitions_may_have_an_item_of_the_same_id(k: Kit) {
    let spec = PartitionSpec::default();
    let one = |id: &str| NewItem::new(b"{}".to_vec()).with_id(id);
    k.store.enqueue("p", &spec, vec![one("a")]).await.unwrap();
    k.store.enqueue("q", &spec, vec![one("a")]).await.unwrap();
    let again = k.store.enqueue("q", &spec, vec![one("b"), one("a")]).await;
    match again {
        Err(Error::Invalid(why)) => {
            assert!(why.contains("already exists in this partition"), "{why}")
        }
        other => panic!("a second `a` in q: {other:?}"),
    }
    assert_eq!(
        rows_of(&k, "a").await,
        [
            ("p".into(), "available".into(), 0),
            ("q".into(), "available".into(), 0)
        ]
    );
    assert!(
        rows_of(&k, "b").await.is_empty(),
        "the refused enqueue wrote nothing"
    );
}

/// A batch with both `a`s (and both `b`s) stores each on its own row,
/// whether the batch is one write or mixed; a stale `a` of one partition
/// leaves the other's `a` stored.
async fn results_of_items_of_the_same_id_are_fenced_by_partition(k: Kit) {
    twins(&k).await;
    let acks: Vec<Ack> = [("a", "p"), ("a", "q")]
        .iter()
        .map(|(id, p)| done(id, p, "s1", 0, 0))
        .collect();
    let got = k.store.write_results(&acks, EXPIRY).await.unwrap();
    assert_eq!(got, vec![Written::Yes; 2]);
    assert_eq!(
        rows_of(&k, "a").await,
        [
            ("p".into(), "complete".into(), 1),
            ("q".into(), "complete".into(), 1)
        ]
    );
    // Mixed: q's `b` fails an attempt; p's `b` is stale (version 7).
    let mut failed = done("b", "q", "s1", 0, 0);
    failed.write.status = crate::status::Status::Available;
    failed.write.attempts = 1;
    failed.write.new_step = false;
    failed.write.last_error = Some("boom".into());
    let acks = vec![
        done("b", "p", "s1", 7, 0),
        failed,
        done("solo", "p", "s1", 0, 0),
    ];
    let got = k.store.write_results(&acks, EXPIRY).await.unwrap();
    assert_eq!(got, [Written::Stale, Written::Yes, Written::Yes]);
    let attempts: Vec<(String, i32)> = k
        .rows(
            "SELECT partition_id, attempts FROM feed_items WHERE id = 'b' ORDER BY partition_id",
            &["partition_id", "attempts"],
        )
        .await;
    assert_eq!(attempts, [("p".into(), 0), ("q".into(), 1)]);
}

async fn an_id_alone_finds_its_item_or_names_the_partitions(k: Kit) {
    twins(&k).await;
    k.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'a' OR id = 'solo'")
        .await;
    let ambiguous = |r: crate::Result<_>| match r {
        Err(Error::Conflict(why)) => {
            assert!(why.contains("several partitions (p, q)"), "{why}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("an ambiguous id was taken"),
    };
    ambiguous(k.store.retry_one(None, "a").await.map(|_| ()));
    ambiguous(k.store.item(None, "a").await.map(|_| ()));
    ambiguous(k.store.item_data(None, "a").await.map(|_| ()));
    assert_eq!(k.store.retry_one(Some("q"), "a").await.unwrap().items, 1);
    assert_eq!(
        rows_of(&k, "a").await,
        [
            ("p".into(), "failed".into(), 0),
            ("q".into(), "available".into(), 1)
        ]
    );
    assert_eq!(k.store.item(Some("p"), "a").await.unwrap().status, "failed");
    assert_eq!(k.store.item(None, "solo").await.unwrap().partition_id, "p");
    assert_eq!(k.store.retry_one(None, "solo").await.unwrap().items, 1);
    assert!(matches!(
        k.store.item(Some("q"), "solo").await,
        Err(Error::NotFound(_))
    ));
}
