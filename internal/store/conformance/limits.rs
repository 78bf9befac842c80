//! Flow control's shared state: tenants' limits are written whole and
//! cleared with their slots; a reservation moves the bucket on by what it
//! costs and is due a burst early; a tenant's slots are shared out under a
//! lock of its limits row, never counting dead sessions.

use std::time::Duration;

use sea_orm::ConnectionTrait;

use super::{EXPIRY, Kit, conformance};
use crate::store::limits::Limit;

conformance!(
    limits_are_written_whole_and_cleared,
    a_reservation_moves_the_bucket_on,
    slots_are_shared_under_the_tenants_lock,
);

async fn limits_are_written_whole_and_cleared(k: Kit) {
    let mut acme = Limit {
        tenant: "acme".into(),
        max_in_flight: Some(5),
        rate: Some(2.5),
        burst: Some(10),
        weight: Some(3),
    };
    k.store.set_limit(&acme).await.unwrap();
    k.store
        .set_limit(&Limit {
            tenant: "beta".into(),
            ..Limit::default()
        })
        .await
        .unwrap();
    assert_eq!(k.store.limits().await.unwrap()[0], acme);
    acme.rate = None;
    acme.max_in_flight = None;
    k.store.set_limit(&acme).await.unwrap();
    let all = k.store.limits().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], acme, "every column is written, unset ones too");
    k.sql("INSERT INTO feed_slots (tenant, session_id, slots, wanted) VALUES ('acme', 's1', 1, 1)")
        .await;
    assert!(k.store.clear_limit(&"acme".into()).await.unwrap());
    assert!(!k.store.clear_limit(&"acme".into()).await.unwrap());
    assert_eq!(k.store.limits().await.unwrap().len(), 1);
    let slots: Vec<(String,)> = k.rows("SELECT tenant FROM feed_slots", &["tenant"]).await;
    assert!(slots.is_empty(), "its slots go with it");
    assert!(
        k.store.set_limit(&Limit::default()).await.is_err(),
        "a tenant is named"
    );
}

/// One token a second with a burst of 10 (slow, so that the statements'
/// own time is small beside it): a first reservation of 10 on a fresh
/// bucket is due at once (a burst early), each next one 10 s after the one
/// before, and the bucket is paid up to 10 s per reservation beyond the
/// first one's start.
async fn a_reservation_moves_the_bucket_on(k: Kit) {
    const S: i64 = 1_000_000; // µs
    let slack = 2 * S;
    let first = k
        .store
        .reserve("fleet", 10.0, 1.0, 10.0)
        .await
        .unwrap()
        .unwrap();
    assert!(
        (-10 * S - slack..=-10 * S + slack).contains(&first),
        "a burst early: {first}"
    );
    let mut last = first;
    for k_th in 1..5 {
        let offset = k
            .store
            .reserve("fleet", 10.0, 1.0, 10.0)
            .await
            .unwrap()
            .unwrap();
        let step = offset - last;
        assert!(
            (10 * S - slack..=10 * S + slack).contains(&step),
            "reservation {k_th} is due {step} µs after the one before"
        );
        last = offset;
    }
    let (paid, now): (i64, i64) = k
        .rows(
            "SELECT paid_until, {now} AS now FROM feed_buckets WHERE name = 'fleet'",
            &["paid_until", "now"],
        )
        .await[0];
    let ahead = paid - now * 1000;
    assert!(
        (50 * S - slack..=50 * S).contains(&ahead),
        "five reservations of 10 s: paid {ahead} µs ahead"
    );
    // Another bucket is its own.
    let other = k
        .store
        .reserve("tenant:a", 1.0, 1.0, 1.0)
        .await
        .unwrap()
        .unwrap();
    assert!(other <= 0, "{other}");
}

/// Takes what the others leave, keeping the calls in flight.
fn greedy(cap: u32, in_use: u32, shares: &[(String, u32, u32)]) -> u32 {
    let others: u32 = shares[1..].iter().map(|(_, slots, _)| slots).sum();
    cap.saturating_sub(others).max(in_use)
}

async fn slots_are_shared_under_the_tenants_lock(k: Kit) {
    for s in ["s1", "s2"] {
        k.session(s).await;
    }
    k.dead_session("s3").await;
    k.sqls(&[
        "INSERT INTO feed_limits (tenant, max_in_flight) VALUES ('acme', 5)",
        "INSERT INTO feed_slots (tenant, session_id, slots, wanted) VALUES ('acme', 's3', 5, 5)",
    ])
    .await;
    let claim = |me: &'static str, in_use: u32, wanted: u32| {
        let store = k.store.clone();
        async move {
            store
                .claim_slots(&"acme".into(), &me.into(), in_use, wanted, EXPIRY, greedy)
                .await
                .unwrap()
        }
    };
    // A dead session's slots are reaped, not counted.
    assert_eq!(claim("s1", 0, 5).await, Some(5));
    assert_eq!(claim("s2", 0, 5).await, Some(0), "nothing left");
    // While another transaction holds the tenant's row, a claim waits,
    // then sees what that transaction wrote.
    let txn = k.store.begin_write().await.unwrap();
    txn.execute_unprepared(&format!(
        "SELECT max_in_flight FROM feed_limits WHERE tenant = 'acme'{}",
        k.store.driver.dialect().for_update
    ))
    .await
    .unwrap();
    txn.execute_unprepared("UPDATE feed_slots SET slots = 2 WHERE session_id = 's1'")
        .await
        .unwrap();
    let waiting = tokio::spawn(claim("s2", 0, 5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the claim waits for the tenant's lock"
    );
    txn.commit().await.unwrap();
    assert_eq!(waiting.await.unwrap(), Some(3));
    let total: Vec<(i32,)> = k
        .rows(
            "SELECT slots FROM feed_slots WHERE tenant = 'acme'",
            &["slots"],
        )
        .await;
    assert_eq!(total.iter().map(|(n,)| n).sum::<i32>(), 5);
    // Calls in flight are kept even beyond what is left.
    assert_eq!(claim("s1", 4, 5).await, Some(4));
    // Without a cap: no slots, and the row goes.
    k.sql("UPDATE feed_limits SET max_in_flight = NULL").await;
    assert_eq!(claim("s1", 0, 5).await, None);
    k.store.release_slots(&"s2".into()).await.unwrap();
    let left: Vec<(String,)> = k
        .rows("SELECT session_id FROM feed_slots", &["session_id"])
        .await;
    assert!(left.is_empty(), "{left:?}");
}
