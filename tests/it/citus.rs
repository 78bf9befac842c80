//! Feed on Citus: its migrations spread the partitions and their items
//! and events over the workers, also from the schema before them, with
//! data; `down` brings the tables back to the coordinator.

use crate::backend_tests;
use crate::migrations::down_before;
use std::time::Duration;

use crate::support::{Handler, Proc, TestDb, done, wait_for};

/// Each of Feed's tables that Citus knows, with its kind (`h` hash
/// distributed, `n` reference) and co-location group.
async fn placement(db: &TestDb) -> Vec<(String, String, i64)> {
    db.rows(
        "SELECT logicalrelid::text AS t, partmethod::text AS m, colocationid::bigint AS c \
         FROM pg_dist_partition WHERE logicalrelid::text LIKE 'feed_%' ORDER BY 1",
        &["t", "m", "c"],
    )
    .await
}

/// The columns of `feed_events`' primary key.
async fn events_key(db: &TestDb) -> Vec<String> {
    db.rows(
        "SELECT a.attname::text AS name FROM pg_index i \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
         WHERE i.indrelid = 'feed_events'::regclass AND i.indisprimary ORDER BY 1",
        &["name"],
    )
    .await
}

backend_tests!(tables_are_spread_over_the_workers: citus => Citus [slow]);
/// Migrated, the partitions, items and events are hash-distributed and
/// co-located, the sessions and tenants' slots are copied to every node,
/// and the rest stays on the coordinator. From the schema before (every
/// table on the coordinator, rows in it) the migration distributes the
/// rows too, and the workers hold them.
async fn tables_are_spread_over_the_workers(db: TestDb) {
    let distributed = |p: &[(String, String, i64)]| {
        let kinds: Vec<(&str, &str)> = p.iter().map(|(t, m, _)| (t.as_str(), m.as_str())).collect();
        assert_eq!(
            kinds,
            [
                ("feed_events", "h"),
                ("feed_items", "h"),
                ("feed_partitions", "h"),
                ("feed_processors", "n"),
                ("feed_slots", "n"),
            ]
        );
        assert!(p[0].2 == p[1].2 && p[1].2 == p[2].2, "co-located: {p:?}");
    };
    distributed(&placement(&db).await);
    assert_eq!(events_key(&db).await, ["id", "partition_id"]);

    down_before(&db, "m20261202_000025").await;
    assert!(placement(&db).await.is_empty(), "all on the coordinator");
    assert_eq!(events_key(&db).await, ["id"]);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM pg_proc WHERE proname = 'feed_now'")
            .await,
        0
    );
    db.sql("INSERT INTO feed_partitions (id) VALUES ('p'), ('q'), ('r')")
        .await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, data) \
         VALUES ('a', 'p', '\\x7b7d'), ('a', 'q', '\\x7b7d'), ('b', 'r', '\\x7b7d')",
    )
    .await;
    db.sql("INSERT INTO feed_events (partition_id, kind, gate) VALUES ('p', 'complete', 0)")
        .await;

    db.store.migrate().await.unwrap();
    distributed(&placement(&db).await);
    assert_eq!(events_key(&db).await, ["id", "partition_id"]);
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 3);
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_events").await, 1);
    let workers = db
        .count(
            "SELECT COUNT(DISTINCT p.nodeport) AS n FROM pg_dist_shard s \
             JOIN pg_dist_shard_placement p ON p.shardid = s.shardid \
             WHERE s.logicalrelid = 'feed_items'::regclass",
        )
        .await;
    assert_eq!(workers, 2, "the items' shards are on both workers");
    // The item path's statements work on the moved rows.
    db.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'b'")
        .await;
    assert_eq!(db.store.retry_one(None, "b").await.unwrap().items, 1);
}

backend_tests!(a_drain_spreads_over_the_workers: citus => Citus [slow]);
/// 1,000 partitions of 5 items drained by one processor: each worker
/// holds 35–65 % of the items. (That each item-path statement runs on
/// its partition's shard alone is held by the store's conformance suite,
/// with Citus's own count of executions over several shards.)
async fn a_drain_spreads_over_the_workers(db: TestDb) {
    db.sql("INSERT INTO feed_partitions (id) SELECT 'p' || g FROM generate_series(1, 1000) g")
        .await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, data) SELECT 'i' || k, 'p' || g, '\\x7b7d' \
         FROM generate_series(1, 1000) g, generate_series(1, 5) k",
    )
    .await;
    let handler = Handler::start(|_| done()).await;
    let _proc = Proc::start(&db, &handler.url(), &[]);
    let closed = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    wait_for(
        "every partition closed",
        Duration::from_secs(180),
        || async { db.count(closed).await == 1000 },
    )
    .await;

    let per_worker: Vec<(i32, i64)> = db
        .rows(
            "SELECT p.nodeport AS port, SUM(r.result::bigint)::bigint AS n \
             FROM run_command_on_shards('feed_items', $$SELECT count(*) FROM %s$$) r \
             JOIN pg_dist_shard_placement p ON p.shardid = r.shardid GROUP BY 1 ORDER BY 1",
            &["port", "n"],
        )
        .await;
    assert_eq!(
        per_worker.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        [9701, 9702]
    );
    for (port, n) in &per_worker {
        assert!(
            (1750..=3250).contains(n),
            "worker {port} holds {n} of 5,000 items"
        );
    }

    eprintln!("items per worker {per_worker:?}");
}
