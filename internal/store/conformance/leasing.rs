//! Leasing: every lease is OCC (taken only at the version read, and only
//! while `available`), a page never gives one partition to two sessions,
//! partitions of dead sessions are found, and one cycle's counts and views
//! say what balancing needs.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::{ConnectionTrait, TransactionTrait};

use super::{EXPIRY, Kit, conformance};
use crate::ids::{PartitionId, SessionId};
use crate::store::LEASE_CHUNK;

conformance!(
    lease_and_release_are_occ,
    lease_many_takes_only_rows_unchanged_since_read,
    pages_are_taken_in_id_order,
    concurrent_pages_never_share_a_partition,
    partitions_of_dead_sessions_are_found,
    a_held_slice_says_what_each_partition_needs,
    counts_cover_sessions_partitions_and_strays,
);
conformance!(a_page_passes_over_a_partition_being_changed: postgres => Postgres);

async fn lease_and_release_are_occ(k: Kit) {
    k.session("s1").await;
    k.session("s2").await;
    k.partition("p", None).await;
    assert!(k.store.lease("p", 0, &"s1".into()).await.unwrap());
    assert!(
        !k.store.lease("p", 0, &"s2".into()).await.unwrap(),
        "read before s1 took it"
    );
    assert_eq!(
        k.partition_row("p").await,
        ("available".into(), 0, 1, Some("s1".into()))
    );
    assert!(
        !k.store.release("p", 0, &"s1".into()).await.unwrap(),
        "stale version"
    );
    assert!(
        !k.store.release("p", 1, &"s2".into()).await.unwrap(),
        "not the owner"
    );
    assert!(k.store.release("p", 1, &"s1".into()).await.unwrap());
    assert_eq!(k.partition_row("p").await, ("available".into(), 0, 2, None));
    k.sql("UPDATE feed_partitions SET status = 'complete'")
        .await;
    assert!(
        !k.store.lease("p", 2, &"s1".into()).await.unwrap(),
        "only available partitions"
    );
}

/// More rows than one statement takes; some changed since they were read
/// (another session took one, one was closed): those are left.
async fn lease_many_takes_only_rows_unchanged_since_read(k: Kit) {
    k.session("s1").await;
    let ids = k.partitions("p", LEASE_CHUNK + 100).await;
    k.sqls(&[
        "UPDATE feed_partitions SET owner = 's2', version = 1 WHERE id = 'p001'",
        "UPDATE feed_partitions SET status = 'complete' WHERE id = 'p002'",
    ])
    .await;
    let read: Vec<(PartitionId, i64)> = ids.iter().map(|id| (id.clone(), 0)).collect();
    let mut taken = k.store.lease_many(&read, &"s1".into()).await.unwrap();
    taken.sort();
    let want: Vec<(PartitionId, i64)> = ids
        .iter()
        .filter(|id| *id != "p001" && *id != "p002")
        .map(|id| (id.clone(), 1))
        .collect();
    assert_eq!(taken, want);
    assert_eq!(k.partition_row("p001").await.3.as_deref(), Some("s2"));
    assert_eq!(k.partition_row("p002").await.3, None);
}

async fn pages_are_taken_in_id_order(k: Kit) {
    k.session("s1").await;
    let ids = k.partitions("p", 10).await;
    k.sqls(&[
        "UPDATE feed_partitions SET owner = 's2' WHERE id = 'p001'",
        "UPDATE feed_partitions SET status = 'complete' WHERE id = 'p002'",
    ])
    .await;
    let mut first = k.store.lease_page("", 3, &"s1".into()).await.unwrap();
    first.sort();
    assert_eq!(
        first,
        [("p000".into(), 1), ("p003".into(), 1), ("p004".into(), 1)]
    );
    let rest = k.store.lease_page("p004", 100, &"s1".into()).await.unwrap();
    let mut rest: Vec<PartitionId> = rest.into_iter().map(|(id, _)| id).collect();
    rest.sort();
    assert_eq!(rest, &ids[5..]);
    assert!(
        k.store
            .lease_page("", 100, &"s1".into())
            .await
            .unwrap()
            .is_empty()
    );
}

/// Two sessions take pages at the same moment until nothing is left: every
/// partition is taken exactly once, and its owner is the one that says so.
async fn concurrent_pages_never_share_a_partition(k: Kit) {
    k.session("s1").await;
    k.session("s2").await;
    let ids = k.partitions("p", 600).await;
    let take = |me: &'static str| {
        let store = k.store.clone();
        async move {
            let mut mine = Vec::new();
            loop {
                let page = store.lease_page("", 50, &me.into()).await.unwrap();
                if page.is_empty() {
                    return mine;
                }
                mine.extend(page.into_iter().map(|(id, _)| id.to_string()));
            }
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(take("s1")), tokio::spawn(take("s2")));
    let (a, b) = (a.unwrap(), b.unwrap());
    let (sa, sb): (HashSet<_>, HashSet<_>) = (a.iter().collect(), b.iter().collect());
    assert!(sa.is_disjoint(&sb), "a partition taken twice");
    assert_eq!(a.len() + b.len(), ids.len());
    let owned_by_s1 = k
        .ids("SELECT id FROM feed_partitions WHERE owner = 's1' ORDER BY id")
        .await;
    let mut a = a;
    a.sort();
    assert_eq!(owned_by_s1, a);
}

/// Where a page is picked and taken in one statement, a partition another
/// transaction is changing is passed over rather than waited for.
async fn a_page_passes_over_a_partition_being_changed(k: Kit) {
    k.session("s1").await;
    k.partitions("p", 3).await;
    let txn = k.store.connection().begin().await.unwrap();
    txn.execute_unprepared("UPDATE feed_partitions SET updated_at = 1 WHERE id = 'p000'")
        .await
        .unwrap();
    let mut page = tokio::time::timeout(
        Duration::from_secs(10),
        k.store.lease_page("", 10, &"s1".into()),
    )
    .await
    .expect("the page does not wait for the held row")
    .unwrap();
    page.sort();
    assert_eq!(page, [("p001".into(), 1), ("p002".into(), 1)]);
    txn.rollback().await.unwrap();
    assert_eq!(
        k.store.lease_page("", 10, &"s1".into()).await.unwrap(),
        [("p000".into(), 1)]
    );
}

async fn partitions_of_dead_sessions_are_found(k: Kit) {
    k.session("live").await;
    k.dead_session("dead").await;
    for (id, owner) in [
        ("a", Some("dead")),
        ("b", Some("live")),
        ("c", Some("dead")),
        ("d", None),
    ] {
        k.partition(id, owner).await;
    }
    k.partition("e", Some("gone")).await;
    let orphans = k.store.orphan_page(EXPIRY, 10).await.unwrap();
    assert_eq!(orphans, [("a".into(), 0), ("c".into(), 0), ("e".into(), 0)]);
    assert_eq!(k.store.orphan_page(EXPIRY, 1).await.unwrap().len(), 1);
    assert_eq!(
        k.store.most_loaded(EXPIRY).await.unwrap(),
        Some(("live".into(), 1))
    );
    assert_eq!(k.store.reap_sessions(EXPIRY).await.unwrap(), 1);
    assert_eq!(k.store.release_all(&"live".into()).await.unwrap(), 1);
    assert_eq!(k.partition_row("b").await, ("available".into(), 0, 1, None));
}

async fn a_held_slice_says_what_each_partition_needs(k: Kit) {
    k.session("s1").await;
    for id in [
        "a-ready",
        "b-paused",
        "c-done",
        "d-backoff",
        "e-next",
        "f-manual",
        "h-older",
        "i-due",
    ] {
        k.partition(id, Some("s1")).await;
    }
    k.partition("g-other", Some("s2")).await;
    k.items(&[
        ("a", "a-ready", 0, "available"),
        ("b", "b-paused", 0, "available"),
        ("c", "c-done", 0, "complete"),
        ("d", "d-backoff", 0, "available"),
        ("e", "e-next", 2, "available"),
        ("f", "f-manual", 2, "available"),
        ("g", "g-other", 0, "available"),
        // The newest item waits; an older one is ready.
        ("h1", "h-older", 0, "available"),
        ("h2", "h-older", 0, "available"),
        // An item whose time has come, before one scheduled for later.
        ("i1", "i-due", 0, "available"),
        ("i2", "i-due", 0, "available"),
    ])
    .await;
    k.sqls(&[
        "UPDATE feed_partitions SET paused = TRUE WHERE id = 'b-paused'",
        "UPDATE feed_items SET not_before = {now} + 3600000 WHERE id IN ('d', 'h2', 'i2')",
        "UPDATE feed_items SET not_before = {now} - 1000 WHERE id = 'i1'",
        "UPDATE feed_partitions SET manual_checkpoint = TRUE WHERE id = 'f-manual'",
    ])
    .await;
    let slice = k.store.held_slice(&"s1".into(), "", 100).await.unwrap();
    let got: Vec<(&str, bool, bool)> = slice
        .iter()
        .map(|r| (r.id.as_str(), r.ready, r.stuck))
        .collect();
    assert_eq!(
        got,
        [
            ("a-ready", true, false),
            ("b-paused", false, false),
            ("c-done", false, true),
            ("d-backoff", false, false),
            ("e-next", false, true),
            ("f-manual", false, false),
            ("h-older", true, false),
            ("i-due", true, false),
        ]
    );
    let page = k
        .store
        .held_slice(&"s1".into(), "b-paused", 2)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["c-done", "d-backoff"]);
}

async fn counts_cover_sessions_partitions_and_strays(k: Kit) {
    let m = SessionId::from("m");
    k.session("m").await;
    k.session("a").await;
    k.store
        .register_session(&"z".into(), "host", 1, Some(5))
        .await
        .unwrap();
    k.dead_session("dead").await;
    for (id, owner) in [
        ("h1", Some("m")),
        ("h2", Some("m")),
        ("a1", Some("a")),
        ("z1", Some("z")),
        ("z2", Some("z")),
        ("u1", None),
        ("u2", None),
    ] {
        k.partition(id, owner).await;
    }
    k.items(&[
        ("h1/0", "h1", 0, "available"),
        ("h1/1", "h1", 0, "available"),
        ("u1/0", "u1", 0, "available"),
    ])
    .await;
    for id in ["c1", "c2", "c3"] {
        k.partition(id, None).await;
    }
    k.sql("UPDATE feed_partitions SET status = 'complete' WHERE id LIKE 'c%'")
        .await;
    k.item("c2/0", "c2", 0, "available").await;
    let counts =
        |after: &'static str, backlog: bool| k.store.lease_counts(&m, 2, EXPIRY, after, backlog);
    let n = counts("", true).await.unwrap();
    assert_eq!((n.sessions, n.capped), (3, 1));
    assert_eq!(n.active, 7, "2 held + 5 others");
    assert_eq!(n.backlog, 2);
    assert_eq!((n.stranded, n.stranded_slice), (1, 3));
    assert_eq!(n.stranded_end.as_deref(), Some("c3"));
    let n = counts("c1", false).await.unwrap();
    assert_eq!((n.backlog, n.stranded_slice), (0, 2));
    assert_eq!(k.store.session_caps(EXPIRY).await.unwrap(), [5]);
    assert_eq!(k.store.reopen_stranded("", "c3").await.unwrap(), 1);
    assert_eq!(k.partition_row("c2").await.0, "available");
}
