//! The movable clock of tests: every statement of a store given one reads
//! the database clock plus its offset (session expiry and backoff move
//! together), and other stores on the same database keep the real clock.

use std::time::Duration;

use super::{EXPIRY, Kit, conformance};
use crate::config::Clock;
use crate::ids::PartitionId;
use crate::store::Ask;

conformance!(a_moved_clock_expires_sessions_and_backoffs_at_once);

async fn a_moved_clock_expires_sessions_and_backoffs_at_once(k: Kit) {
    let clock = Clock::movable();
    let moved = k.store.with_clock(clock);
    moved
        .register_session(&"s1".into(), "host", 1, None)
        .await
        .unwrap();
    k.partition("p", Some("s1")).await;
    k.item("later", "p", 0, "available").await;
    k.sql("UPDATE feed_items SET not_before = {now} + 1800000 WHERE id = 'later'")
        .await;
    let want = [Ask::from((PartitionId::from("p"), 5))];
    let ready = |store: &crate::store::Store| {
        let store = store.clone();
        let want = want.clone();
        async move { store.ready_items(&"s1".into(), &want).await.unwrap().len() }
    };
    assert_eq!(ready(&moved).await, 0, "the backoff has half an hour to go");
    assert_eq!(moved.reap_sessions(EXPIRY).await.unwrap(), 0);

    clock.advance(Duration::from_secs(31 * 60));
    // The real clock read first: the moved one, read after, is no less ahead.
    let real = k.store.now_ms().await.unwrap();
    let skew = moved.now_ms().await.unwrap() - real;
    assert!(
        (31 * 60_000..32 * 60_000).contains(&skew),
        "the moved clock runs 31 minutes ahead, not {skew} ms"
    );
    assert_eq!(ready(&k.store).await, 0, "the real clock has not moved");
    assert_eq!(k.store.reap_sessions(EXPIRY).await.unwrap(), 0);
    assert_eq!(ready(&moved).await, 1, "the backoff is over");
    assert_eq!(
        moved.reap_sessions(EXPIRY).await.unwrap(),
        1,
        "a session silent for 31 minutes is dead"
    );
}

conformance!(the_clock_reaches_distributed_tables: citus => Citus [slow]);

/// On a distributed table Citus takes the clock (`feed_now()`) where
/// Feed's statements put it, where it refuses PostgreSQL's volatile
/// expression: in `SET` and `WHERE` of an `UPDATE` over every shard or
/// over one, and in an `INSERT`'s values, `COALESCE` included. It still
/// refuses it inside an `UPDATE`'s `CASE`, which Feed's statements
/// therefore never hold. The time written is the database's.
async fn the_clock_reaches_distributed_tables(k: Kit) {
    use crate::store::driver::{Driver, Sql};
    k.sqls(&[
        "CREATE TABLE feed_clock_probe (p TEXT, id TEXT, at BIGINT NOT NULL DEFAULT 0, \
         v BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (p, id))",
        "SELECT create_distributed_table('feed_clock_probe', 'p')",
    ])
    .await;
    let insert = "INSERT INTO feed_clock_probe (p, id, at) \
                  VALUES ('a', '1', COALESCE(NULL, {now} + 0)), ('b', '2', {now})";
    assert_eq!(k.sql(insert).await, 2);
    let every_shard = "UPDATE feed_clock_probe SET at = {now} WHERE at <= {now}";
    let refused = |driver: Driver, sql: &str| {
        let mut s = Sql::new(driver);
        s.push(sql);
        let store = k.store.clone();
        async move { store.run(s.statement()).await }
    };
    let volatile = refused(Driver::Postgres, every_shard).await;
    assert!(
        volatile.is_err(),
        "Citus took a volatile clock: {volatile:?}"
    );
    assert_eq!(k.sql(every_shard).await, 2, "both shards' rows");
    let one_shard = "UPDATE feed_clock_probe SET v = {now} + 5 WHERE p = 'a' AND at <= {now}";
    assert_eq!(k.sql(one_shard).await, 1);
    let in_case =
        "UPDATE feed_clock_probe SET v = CASE WHEN v = 0 THEN {now} ELSE 0 END WHERE p = 'a'";
    let case = refused(Driver::Citus, in_case).await;
    assert!(case.is_err(), "Citus took a clock inside CASE: {case:?}");
    let now = k.store.now_ms().await.unwrap();
    let rows: Vec<(String, i64, i64)> = k
        .rows(
            "SELECT p, at, v FROM feed_clock_probe ORDER BY p",
            &["p", "at", "v"],
        )
        .await;
    assert_eq!(rows.len(), 2);
    for (p, at, v) in rows {
        assert!((now - 60_000..=now).contains(&at), "{p}: {at} vs {now}");
        assert!(
            p != "a" || (at + 5..=now + 5).contains(&v),
            "{p}: {v} vs {at}..{now}"
        );
    }
}
