//! The figures operators watch, read from the database: the backlog by
//! tenant, and how long a ready item has waited when dispatch reads it,
//! counted from the moment it became ready (written, its time come, its
//! gate opened), not from its enqueue.

use super::{Kit, conformance};
use crate::ids::PartitionId;
use crate::store::Ask;
use crate::store::backlog::TenantBacklog;
use crate::store::driver::sql;

conformance!(the_backlog_counts_by_tenant_from_when_items_became_ready);

async fn the_backlog_counts_by_tenant_from_when_items_became_ready(k: Kit) {
    k.session("s1").await;
    for p in ["a", "b", "c", "d"] {
        k.partition(p, Some("s1")).await;
    }
    k.sqls(&[
        "UPDATE feed_partitions SET tenant = 'acme' WHERE id IN ('a', 'b')",
        "UPDATE feed_partitions SET tenant = 'zed', gate = 1, gate_at = {now} - 5000 WHERE id = 'd'",
        "UPDATE feed_partitions SET paused = TRUE WHERE id = 'b'",
    ])
    .await;
    k.items(&[
        ("a-written", "a", 0, "available"),
        ("a-due", "a", 0, "available"),
        ("a-later-gate", "a", 1, "available"),
        ("a-scheduled", "a", 0, "available"),
        ("a-retrying", "a", 0, "available"),
        ("a-done", "a", 0, "complete"),
        ("b-paused", "b", 0, "available"),
        ("c-new", "c", 0, "available"),
        ("d-opened", "d", 1, "available"),
    ])
    .await;
    k.sqls(&[
        "UPDATE feed_items SET updated_at = {now} - 20000 WHERE id = 'a-written'",
        "UPDATE feed_items SET updated_at = {now} - 30000, not_before = {now} - 8000 WHERE id = 'a-due'",
        "UPDATE feed_items SET not_before = {now} + 600000 WHERE id = 'a-scheduled'",
        "UPDATE feed_items SET not_before = {now} + 600000, attempts = 2 WHERE id = 'a-retrying'",
        "UPDATE feed_items SET updated_at = {now} - 60000 WHERE id = 'b-paused'",
        "UPDATE feed_items SET updated_at = {now} - 1000 WHERE id = 'c-new'",
        "UPDATE feed_items SET updated_at = {now} - 60000 WHERE id = 'd-opened'",
    ])
    .await;

    let backlog = k.store.backlog().await.unwrap();
    let row = |tenant: Option<&str>| -> &TenantBacklog {
        backlog
            .iter()
            .find(|t| t.tenant.as_deref() == tenant)
            .unwrap_or_else(|| panic!("no backlog for {tenant:?}: {backlog:?}"))
    };
    let within = |ms: Option<i64>, from: i64| {
        let ms = ms.expect("an oldest age");
        assert!(
            (from..from + 10_000).contains(&ms),
            "{ms} ms, want {from} ms or a little more: {backlog:?}"
        );
    };
    assert_eq!(backlog.len(), 3, "{backlog:?}");
    assert_eq!(backlog[0].tenant, None, "no tenant first: {backlog:?}");
    let (none, acme, zed) = (row(None), row(Some("acme")), row(Some("zed")));
    assert_eq!((none.ready, none.scheduled, none.retrying), (1, 0, 0));
    within(none.oldest_ready_ms, 1_000);
    // a-written and a-due; the paused partition's item and the one above
    // its partition's gate are not ready.
    assert_eq!(
        (acme.ready, acme.scheduled, acme.retrying),
        (2, 1, 1),
        "{backlog:?}"
    );
    within(acme.oldest_ready_ms, 20_000);
    // Written a minute ago, ready since its gate opened 5 s ago.
    assert_eq!((zed.ready, zed.scheduled, zed.retrying), (1, 0, 0));
    within(zed.oldest_ready_ms, 5_000);

    let ask = |p: &str| Ask::from((PartitionId::from(p), 10));
    let read = k
        .store
        .ready_items(&"s1".into(), &[ask("a"), ask("d")])
        .await
        .unwrap();
    let waited = |id: &str| {
        let item = read.iter().find(|i| i.fence.id.as_str() == id).unwrap();
        item.waited.expect("a wait").as_millis() as i64
    };
    assert_eq!(read.len(), 3, "a-written, a-due, d-opened: {read:?}");
    within(Some(waited("a-written")), 20_000);
    within(Some(waited("a-due")), 8_000);
    within(Some(waited("d-opened")), 5_000);

    k.sql("DELETE FROM feed_items").await;
    assert_eq!(
        k.store.backlog().await.unwrap(),
        vec![],
        "nothing available"
    );
}

conformance!(the_backlog_is_exact_over_ten_thousand_partitions);

/// 10,000 partitions, half of tenant `x`, each with one ready item and
/// one scheduled an hour ahead; one ready item written 30 s ago.
async fn the_backlog_is_exact_over_ten_thousand_partitions(k: Kit) {
    k.partitions("p", 10_000).await;
    let data = b"{}".to_vec();
    let d = k.store.driver();
    k.exec(sql!(d; "INSERT INTO feed_items (id, partition_id, data) SELECT 'a', id, " {data.clone()} " FROM feed_partitions"))
        .await;
    k.exec(
        sql!(d; "INSERT INTO feed_items (id, partition_id, data, not_before) \
         SELECT 'b', id, " {data} ", {now} + 3600000 FROM feed_partitions"),
    )
    .await;
    k.sqls(&[
        "UPDATE feed_partitions SET tenant = 'x' WHERE id LIKE '%0' OR id LIKE '%2' \
         OR id LIKE '%4' OR id LIKE '%6' OR id LIKE '%8'",
        "UPDATE feed_items SET updated_at = {now} - 30000 WHERE partition_id = 'p1234' AND id = 'a'",
    ])
    .await;
    let backlog = k.store.backlog().await.unwrap();
    assert_eq!(backlog.len(), 2, "{backlog:?}");
    for t in &backlog {
        assert_eq!(
            (t.ready, t.scheduled, t.retrying),
            (5_000, 5_000, 0),
            "{backlog:?}"
        );
    }
    let oldest = backlog[1].oldest_ready_ms.unwrap();
    assert!((30_000..40_000).contains(&oldest), "{backlog:?}");
    assert!(backlog[0].oldest_ready_ms.unwrap() < 30_000, "{backlog:?}");
}

conformance!(a_partitions_rate_and_eta_come_from_its_last_five_minutes);

/// Created 10 minutes ago: 30 items completed in the last 5 minutes, 5
/// before, 60 left: 0.1 a second, done in 600 s. A partition with nothing
/// completed lately has no ETA.
async fn a_partitions_rate_and_eta_come_from_its_last_five_minutes(k: Kit) {
    for p in ["busy", "idle"] {
        k.partition(p, None).await;
    }
    for i in 0..95 {
        let status = if i < 35 { "complete" } else { "available" };
        k.item(&format!("b{i:02}"), "busy", 0, status).await;
    }
    k.item("i0", "idle", 0, "available").await;
    k.sqls(&[
        "UPDATE feed_partitions SET created_at = {now} - 600000",
        "UPDATE feed_items SET updated_at = {now} - 10000 WHERE status = 'complete'",
        "UPDATE feed_items SET updated_at = {now} - 400000 WHERE id IN ('b00', 'b01', 'b02', 'b03', 'b04')",
    ])
    .await;
    let busy = k.store.partition("busy").await.unwrap();
    assert!((busy.rate - 0.1).abs() < 1e-9, "{busy:?}");
    let eta = busy.eta_ms.unwrap();
    assert!((599_000..=601_000).contains(&eta), "{busy:?}");
    assert!(
        (600_000..610_000).contains(&busy.age_ms.unwrap()),
        "{busy:?}"
    );
    let idle = k.store.partition("idle").await.unwrap();
    assert_eq!((idle.rate, idle.eta_ms), (0.0, None), "{idle:?}");
}
