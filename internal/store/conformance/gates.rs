//! Gate checks: the probe says what each held partition's items call for;
//! advance, close and fail are OCC writes fenced by the owner, and advance
//! and close re-check in the same statement that nothing available was
//! added behind the processor's back.

use std::collections::HashMap;

use super::{Kit, conformance};
use crate::ids::PartitionId;
use crate::store::{GateProbe, HeldPartition};

conformance!(
    probes_say_what_each_partition_needs,
    advance_and_fail_are_occ_and_owner_fenced,
    advance_and_close_recheck_for_available_items,
    close_finished_closes_only_finished_partitions,
    unrunnable_items_fail_with_a_reason,
    a_scheduled_item_holds_its_gate,
);

/// `id` as a gate check reads it (held by `me`).
async fn held(k: &Kit, me: &str, id: &str) -> HeldPartition {
    let mut found = k
        .store
        .partitions_for_check(&me.into(), &[id.into()])
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{id} is held by {me}");
    found.remove(0).0
}

async fn probes_say_what_each_partition_needs(k: Kit) {
    k.session("s1").await;
    k.session("s2").await;
    let me = Some("s1");
    let cases: [(&str, &[(i64, &str)]); 12] = [
        ("waiting", &[(0, "available")]),
        ("paused", &[(0, "available")]),
        ("backoff", &[(0, "available")]),
        ("due", &[(0, "available"), (0, "available")]),
        ("behind", &[(0, "available"), (0, "available")]),
        ("below", &[(1, "available"), (2, "complete")]),
        ("unknown", &[(0, "weird")]),
        ("blocked", &[(0, "failed"), (1, "available")]),
        ("continues", &[(0, "failed")]),
        (
            "next",
            &[(0, "complete"), (3, "available"), (5, "available")],
        ),
        ("done", &[(0, "complete"), (0, "cancelled")]),
        ("lost", &[(0, "available")]),
    ];
    for (id, items) in cases {
        k.partition(id, if id == "lost" { Some("s2") } else { me })
            .await;
        for (n, (gate, status)) in items.iter().enumerate() {
            k.item(&format!("{id}/{n}"), id, *gate, status).await;
        }
    }
    k.sqls(&[
        "UPDATE feed_partitions SET paused = TRUE WHERE id = 'paused'",
        "UPDATE feed_items SET not_before = {now} + 3600000 WHERE partition_id = 'backoff'",
        // One item due a second ago behind one scheduled for later.
        "UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'due/1'",
        "UPDATE feed_items SET not_before = {now} - 1000 WHERE id = 'due/0'",
        // One item without a time written before one scheduled for later.
        "UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'behind/1'",
        "UPDATE feed_partitions SET gate = 2 WHERE id = 'below'",
        "UPDATE feed_partitions SET on_failure = 'continue' WHERE id = 'continues'",
    ])
    .await;
    let ids: Vec<PartitionId> = cases.iter().map(|(id, _)| PartitionId::from(*id)).collect();
    let mut got: HashMap<String, GateProbe> = k
        .store
        .partitions_for_check(&"s1".into(), &ids)
        .await
        .unwrap()
        .into_iter()
        .map(|(p, probe)| (p.id.to_string(), probe))
        .collect();
    // A partition waiting out a time says when it comes due.
    let Some(GateProbe::Idle(Some(due_in))) = got.remove("backoff") else {
        panic!("backoff is idle with a due time: {got:?}");
    };
    assert!(
        (3_500_000..=3_600_000).contains(&due_in),
        "due in {due_in} ms"
    );
    let want: HashMap<String, GateProbe> = [
        ("waiting", GateProbe::Waiting),
        ("paused", GateProbe::Idle(None)),
        ("due", GateProbe::Waiting),
        ("behind", GateProbe::Waiting),
        ("below", GateProbe::Unrunnable),
        ("unknown", GateProbe::Unrunnable),
        ("blocked", GateProbe::Blocked),
        ("continues", GateProbe::Next(None)),
        ("next", GateProbe::Next(Some(3))),
        ("done", GateProbe::Next(None)),
    ]
    .into_iter()
    .map(|(id, p)| (id.to_string(), p))
    .collect();
    assert_eq!(got, want, "`lost` is held by another session and left out");
}

async fn advance_and_fail_are_occ_and_owner_fenced(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.item("x", "p", 3, "available").await;
    let p = held(&k, "s1", "p").await;
    assert!(
        !k.store.advance_gate(&p, &"s2".into(), 3).await.unwrap(),
        "not the owner"
    );
    let stale = HeldPartition {
        version: p.version + 1,
        ..p.clone()
    };
    assert!(
        !k.store.advance_gate(&stale, &"s1".into(), 3).await.unwrap(),
        "stale version"
    );
    assert_eq!(
        k.partition_row("p").await,
        ("available".into(), 0, 0, Some("s1".into()))
    );
    assert!(k.store.advance_gate(&p, &"s1".into(), 3).await.unwrap());
    assert_eq!(
        k.partition_row("p").await,
        ("available".into(), 3, 1, Some("s1".into()))
    );
    // `p` as read before the advance: its failure decision is stale.
    assert!(!k.store.fail_partition(&p, &"s1".into()).await.unwrap());
    let p = held(&k, "s1", "p").await;
    assert!(!k.store.fail_partition(&p, &"s2".into()).await.unwrap());
    assert!(k.store.fail_partition(&p, &"s1".into()).await.unwrap());
    assert_eq!(k.partition_row("p").await, ("failed".into(), 3, 2, None));
}

/// An item made available behind the processor's back (no version bump)
/// is seen by the advance and close statements themselves.
async fn advance_and_close_recheck_for_available_items(k: Kit) {
    k.session("me").await;
    k.partition("p", Some("me")).await;
    let p = HeldPartition {
        id: "p".into(),
        gate: 0,
        version: 0,
        auto_close: true,
        manual_checkpoint: false,
    };
    // Read with nothing left: a close would be decided. An item arrives.
    k.item("late", "p", 0, "available").await;
    let closed = k
        .store
        .close_partitions(std::slice::from_ref(&p), &"me".into())
        .await;
    assert!(closed.unwrap().is_empty());
    assert!(!k.store.advance_gate(&p, &"me".into(), 2).await.unwrap());
    assert_eq!(
        k.partition_row("p").await,
        ("available".into(), 0, 0, Some("me".into()))
    );
    // Without it both pass.
    k.sql("DELETE FROM feed_items WHERE id = 'late'").await;
    assert!(k.store.advance_gate(&p, &"me".into(), 2).await.unwrap());
    let moved = HeldPartition { version: 1, ..p };
    let closed = k
        .store
        .close_partitions(&[moved], &"me".into())
        .await
        .unwrap();
    assert_eq!(closed, ["p"]);
    assert_eq!(k.partition_row("p").await, ("complete".into(), 2, 2, None));
}

/// Closing unread: only partitions that close by themselves, are still at
/// the version last seen, and whose every item is complete or cancelled;
/// more than one statement's worth at once.
async fn close_finished_closes_only_finished_partitions(k: Kit) {
    k.session("s1").await;
    let many = k.partitions("f", 600).await;
    k.sql("UPDATE feed_partitions SET owner = 's1'").await;
    for (n, id) in many.iter().enumerate() {
        let status = if n % 2 == 0 { "complete" } else { "cancelled" };
        k.item(&format!("{id}/0"), id, 0, status).await;
    }
    for id in ["open", "manual", "stale", "failed", "other"] {
        k.partition(id, Some("s1")).await;
        k.item(&format!("{id}/0"), id, 0, "complete").await;
    }
    k.item("open/1", "open", 0, "available").await;
    k.item("failed/1", "failed", 0, "failed").await;
    k.sqls(&[
        "UPDATE feed_partitions SET auto_close = FALSE WHERE id = 'manual'",
        "UPDATE feed_partitions SET version = 7 WHERE id = 'stale'",
        "UPDATE feed_partitions SET owner = NULL WHERE id = 'other'",
    ])
    .await;
    let mut parts: Vec<(PartitionId, i64)> = many.iter().map(|id| (id.clone(), 0)).collect();
    for id in ["open", "manual", "stale", "failed", "other"] {
        parts.push((id.into(), 0));
    }
    let mut closed = k.store.close_finished(&parts, &"s1".into()).await.unwrap();
    closed.sort();
    assert_eq!(closed, many);
    let left = k
        .ids("SELECT id FROM feed_partitions WHERE status = 'available' ORDER BY id")
        .await;
    assert_eq!(left, ["failed", "manual", "open", "other", "stale"]);
    assert_eq!(
        k.partition_row("f000").await,
        ("complete".into(), 0, 1, None)
    );
}

/// Items no gate can ever run (available below the partition's gate, or
/// a status Feed does not know) fail with a `last_error` saying what to do;
/// only in a partition the caller holds.
async fn unrunnable_items_fail_with_a_reason(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.sql("UPDATE feed_partitions SET gate = 2 WHERE id = 'p'")
        .await;
    k.items(&[
        ("low", "p", 1, "available"),
        ("odd", "p", 2, "weird"),
        ("ok", "p", 2, "available"),
    ])
    .await;
    let p = held(&k, "s1", "p").await;
    assert_eq!(k.store.fail_unrunnable(&p, &"s2".into()).await.unwrap(), 0);
    assert_eq!(k.store.fail_unrunnable(&p, &"s1".into()).await.unwrap(), 2);
    let errors: Vec<(String, String, String)> = k
        .rows(
            "SELECT id, status, last_error FROM feed_items WHERE last_error IS NOT NULL ORDER BY id",
            &["id", "status", "last_error"],
        )
        .await;
    let want = [
        ("low", "below its partition's gate 2"),
        ("odd", "unknown status 'weird'"),
    ];
    assert_eq!(errors.len(), want.len(), "{errors:?}");
    for ((id, status, error), (want_id, says)) in errors.iter().zip(want) {
        assert_eq!((id.as_str(), status.as_str()), (want_id, "failed"));
        assert!(error.contains(says), "{error}");
    }
    assert_eq!(k.item_row("ok").await.0, "available");
}

/// An item scheduled for later is available at its gate: the check finds
/// the partition idle until then (not ready to advance to the work behind
/// it), and an advance computed anyway is refused by its own re-check.
/// Once its time has come it is work at the gate like any other.
async fn a_scheduled_item_holds_its_gate(k: Kit) {
    k.session("s1").await;
    k.partition("p", Some("s1")).await;
    k.items(&[
        ("later", "p", 0, "available"),
        ("next", "p", 1, "available"),
    ])
    .await;
    k.sql("UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'later'")
        .await;
    let found = k
        .store
        .partitions_for_check(&"s1".into(), &["p".into()])
        .await
        .unwrap();
    let [(p, GateProbe::Idle(Some(due_in)))] = found.as_slice() else {
        panic!("idle until the item comes due: {found:?}");
    };
    assert!((3_500_000..=3_600_000).contains(due_in), "{due_in}");
    assert!(
        !k.store.advance_gate(p, &"s1".into(), 1).await.unwrap(),
        "an advance past it is refused"
    );
    assert_eq!(k.partition_row("p").await.1, 0);
    k.sql("UPDATE feed_items SET not_before = {now} - 1 WHERE id = 'later'")
        .await;
    let found = k
        .store
        .partitions_for_check(&"s1".into(), &["p".into()])
        .await
        .unwrap();
    assert_eq!(found[0].1, GateProbe::Waiting, "due: work at the gate");
}
