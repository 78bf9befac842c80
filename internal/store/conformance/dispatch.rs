//! Dispatch reads: the ready items of held partitions, oldest first within
//! a gate, at most as many per partition as asked (fairness), only from
//! partitions the caller holds; and the positions of new writes.

use testkit::Backend;

use super::{Kit, conformance};
use crate::ids::PartitionId;
use crate::store::Ask;

conformance!(
    ready_items_come_in_write_order_per_partition,
    a_read_after_a_position_skips_what_came_before,
    new_writes_are_found_by_position,
    scheduled_items_are_read_once_due,
    postgres_plans_the_dispatch_read_once,
);

async fn ready_items_come_in_write_order_per_partition(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.partition("q", Some("s1")).await;
    k.partition("other", Some("s2")).await;
    // Written in this order; ids sort the other way.
    for id in ["p9", "p8", "p7", "p6"] {
        k.item(id, "p", 0, "available").await;
    }
    k.items(&[
        ("p-later", "p", 1, "available"),
        ("p-done", "p", 0, "complete"),
        ("q2", "q", 0, "available"),
        ("q1", "q", 0, "available"),
        ("o1", "other", 0, "available"),
    ])
    .await;
    k.sql("UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'p8'")
        .await;
    let want =
        [("p", 2), ("q", 5), ("other", 5)].map(|(p, n)| Ask::from((PartitionId::from(p), n)));
    let got = k.store.ready_items(&"s1".into(), &want).await.unwrap();
    let mut ids: Vec<(&str, &str)> = got
        .iter()
        .map(|r| (r.fence.partition_id.as_str(), r.fence.id.as_str()))
        .collect();
    // Branches may come back in any order; each partition's own are ordered.
    ids.sort_by_key(|(p, _)| *p);
    assert_eq!(ids, [("p", "p9"), ("p", "p7"), ("q", "q2"), ("q", "q1")]);
    let first = &got.iter().find(|r| r.fence.id == "p9").unwrap();
    assert_eq!(
        (first.fence.gate, first.fence.version, first.fence.attempts),
        (0, 0, 0)
    );
    assert_eq!(first.data, b"{}");
}

/// A refill that knows a partition's first items already reads only those
/// written after the last one it read, still in write order, still at the
/// partition's gate and past their backoff.
async fn a_read_after_a_position_skips_what_came_before(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    for id in ["a", "b", "c", "d", "e"] {
        k.item(id, "p", 0, "available").await;
    }
    k.item("later-gate", "p", 1, "available").await;
    k.sql("UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'd'")
        .await;
    let read = |n: usize, after: Option<i64>| {
        let ask = Ask {
            partition: "p".into(),
            n,
            after,
            due: n,
        };
        let store = k.store.clone();
        async move { store.ready_items(&"s1".into(), &[ask]).await.unwrap() }
    };
    let first = read(2, None).await;
    let ids: Vec<&str> = first.iter().map(|r| r.fence.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(first[0].seq < first[1].seq, "seq follows write order");
    let rest = read(10, Some(first[1].seq)).await;
    let ids: Vec<&str> = rest.iter().map(|r| r.fence.id.as_str()).collect();
    assert_eq!(ids, ["c", "e"]);
    let none = read(10, Some(rest[1].seq)).await;
    assert!(none.is_empty(), "nothing ready after the last item");
}

async fn new_writes_are_found_by_position(k: Kit) {
    k.partition("p", None).await;
    k.partition("q", None).await;
    let (none, start) = k.store.written_since(None, 10).await.unwrap();
    assert!(none.is_empty());
    k.items(&[
        ("a", "q", 0, "available"),
        ("b", "p", 0, "available"),
        ("c", "q", 0, "available"),
    ])
    .await;
    let (parts, end) = k.store.written_since(Some(start), 2).await.unwrap();
    assert_eq!(parts, ["q", "p"]);
    let (parts, last) = k.store.written_since(Some(end), 10).await.unwrap();
    assert_eq!(parts, ["q"]);
    assert_eq!(
        k.store.written_since(Some(last), 10).await.unwrap(),
        (vec![], last)
    );
}

/// Items scheduled for later are not read; those whose time has come are,
/// the first due first when there are more than asked, and a read comes
/// back in write order with the items that have no time.
async fn scheduled_items_are_read_once_due(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    for id in ["a", "later1", "b", "due2", "due1", "later2", "c"] {
        k.item(id, "p", 0, "available").await;
    }
    k.sqls(&[
        "UPDATE feed_items SET not_before = {now} + 3600000 WHERE id IN ('later1', 'later2')",
        "UPDATE feed_items SET not_before = {now} - 1000 WHERE id = 'due2'",
        "UPDATE feed_items SET not_before = {now} - 2000 WHERE id = 'due1'",
    ])
    .await;
    let read = |n: usize, due: usize| {
        let ask = Ask {
            partition: "p".into(),
            n,
            after: None,
            due,
        };
        let store = k.store.clone();
        async move { store.ready_items(&"s1".into(), &[ask]).await.unwrap() }
    };
    let all = read(10, 10).await;
    let ids: Vec<(&str, bool)> = all
        .iter()
        .map(|r| (r.fence.id.as_str(), r.scheduled))
        .collect();
    assert_eq!(
        ids,
        [
            ("a", false),
            ("b", false),
            ("due2", true),
            ("due1", true),
            ("c", false)
        ]
    );
    let few = read(2, 1).await;
    let ids: Vec<&str> = few.iter().map(|r| r.fence.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "due1"], "the first due of the scheduled");
}

/// PostgreSQL plans the dispatch read once per connection: it chose a
/// custom plan for every call otherwise (milliseconds of planning at a
/// hundred branches, on every refill). Its own count of each prepared
/// statement's plans says which it used; the other databases (Citus
/// included, whose coordinator plans each call's shards) keep none.
async fn postgres_plans_the_dispatch_read_once(k: Kit) {
    if k.backend != Backend::Postgres {
        return;
    }
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.item("a", "p", 0, "available").await;
    for _ in 0..8 {
        let ask = Ask::from((PartitionId::from("p"), 5));
        let got = k.store.ready_items(&"s1".into(), &[ask]).await.unwrap();
        assert_eq!(got.len(), 1);
    }
    // The pool may have read on more than one connection; a check lands
    // on one of them, and every one that read has the statement.
    let check = "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
                 WHERE statement LIKE '%AS gate_at FROM feed_items%' \
                 AND statement NOT LIKE '%pg_prepared_statements%'";
    let mut seen = Vec::new();
    for _ in 0..20 {
        seen = k
            .rows::<(i64, i64)>(check, &["generic_plans", "custom_plans"])
            .await;
        if !seen.is_empty() {
            break;
        }
    }
    assert!(!seen.is_empty(), "no connection checked had read");
    for (generic, custom) in seen {
        assert!(
            generic > 0 && custom == 0,
            "{generic} generic, {custom} custom plans"
        );
    }
}
