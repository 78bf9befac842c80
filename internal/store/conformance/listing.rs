//! The console's reads: partitions by status and id prefix (byte for
//! byte, LIKE's wildcards literal) page by page, a partition's items by
//! gate and status in write order, and a status's failed and retrying
//! items.

use super::{Kit, conformance};
use crate::store::listing::{ItemFilter, PartitionFilter};

conformance!(
    partitions_filter_by_prefix_and_page,
    items_filter_and_page_in_write_order,
    status_lists_failed_and_retrying_items,
);

async fn partitions_filter_by_prefix_and_page(k: Kit) {
    for id in ["a-1", "a-2", "a-3", "A-4", "ax1", "a_1", "b-1"] {
        k.partition(id, None).await;
    }
    k.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'a-2'")
        .await;
    let list = |prefix: &str, status: Option<&str>, after: Option<&str>, limit| {
        let f = PartitionFilter {
            prefix: Some(prefix.into()),
            status: status.map(Into::into),
            after: after.map(Into::into),
            limit,
            ..Default::default()
        };
        let store = k.store.clone();
        async move {
            let page = store.partitions(&f).await.unwrap();
            let ids: Vec<String> = page.data.into_iter().map(|p| p.id).collect();
            (ids, page.next)
        }
    };
    assert_eq!(
        list("a-", None, None, 2).await,
        (vec!["a-1".into(), "a-2".into()], Some("a-2".into()))
    );
    assert_eq!(
        list("a-", None, Some("a-2"), 2).await,
        (vec!["a-3".into()], None)
    );
    assert_eq!(list("a_", None, None, 10).await, (vec!["a_1".into()], None));
    assert_eq!(
        list("a-", Some("available"), None, 10).await,
        (vec!["a-1".into(), "a-3".into()], None)
    );
}

async fn items_filter_and_page_in_write_order(k: Kit) {
    k.partition("p", None).await;
    k.items(&[
        ("z", "p", 0, "available"),
        ("y", "p", 0, "complete"),
        ("x", "p", 1, "available"),
        ("w", "p", 0, "available"),
    ])
    .await;
    let items = |gate, status: Option<&str>, after: Option<&str>| {
        let f = ItemFilter {
            gate,
            status: status.map(Into::into),
            after: after.map(Into::into),
            limit: 2,
            ..Default::default()
        };
        let store = k.store.clone();
        async move {
            let page = store.items("p", &f).await.unwrap();
            let ids: Vec<String> = page.data.into_iter().map(|i| i.id).collect();
            (ids, page.next)
        }
    };
    assert_eq!(
        items(None, None, None).await,
        (vec!["z".into(), "y".into()], Some("y".into()))
    );
    assert_eq!(
        items(None, None, Some("y")).await,
        (vec!["x".into(), "w".into()], None)
    );
    assert_eq!(
        items(Some(0), Some("available"), None).await,
        (vec!["z".into(), "w".into()], None)
    );
    let one = k.store.item(None, "x").await.unwrap();
    assert_eq!((one.gate, one.data_preview.as_str()), (1, "{}"));
    assert!(
        k.store
            .items("nobody", &ItemFilter::default())
            .await
            .is_err()
    );
}

async fn status_lists_failed_and_retrying_items(k: Kit) {
    k.partition("p", None).await;
    k.partition("q", None).await;
    k.items(&[
        ("p1", "p", 0, "failed"),
        ("p2", "p", 0, "available"),
        ("q1", "q", 0, "failed"),
    ])
    .await;
    k.sql("UPDATE feed_items SET attempts = 2 WHERE id = 'p2'")
        .await;
    let ids = |v: Vec<crate::store::listing::ItemView>| -> Vec<String> {
        v.into_iter().map(|i| i.id).collect()
    };
    let all = k.store.status(None).await.unwrap();
    assert_eq!(ids(all.failed_items), ["p1", "q1"]);
    assert_eq!(ids(all.retrying_items), ["p2"]);
    let p = k.store.status(Some("q")).await.unwrap();
    assert_eq!(ids(p.failed_items), ["q1"]);
    assert!(p.retrying_items.is_empty());
}
