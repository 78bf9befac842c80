//! Feed on Citus: its migrations spread the partitions and their items
//! and events over the workers, also from the schema before them, with
//! data; `down` brings the tables back to the coordinator. A drain goes on
//! while shards move between the workers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::backend_tests;
use crate::migrations::down_before;
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

/// Moves one shard of the partitions' co-location group (its items and
/// events with it) from the worker at port `from` to the one at `to`,
/// blocking writes to it meanwhile.
async fn move_a_shard(db: &TestDb, from: u16, to: u16) {
    db.sql(&format!(
        "SELECT citus_move_shard_placement(s.shardid, '127.0.0.1', {from}, '127.0.0.1', {to}, \
         shard_transfer_mode => 'block_writes') \
         FROM pg_dist_shard s JOIN pg_dist_shard_placement p ON p.shardid = s.shardid \
         WHERE s.logicalrelid = 'feed_partitions'::regclass AND p.nodeport = {from} LIMIT 1"
    ))
    .await;
}

backend_tests!(a_drain_goes_on_while_shards_move: citus => Citus [slow]);
/// Two nodes drain 40 partitions of 10 items while shards move between
/// the workers, each move under way with calls in flight (the handler
/// answers only as the test lets it). Every item completes with its result
/// written once (version 1), and every partition closes with one event.
async fn a_drain_goes_on_while_shards_move(db: TestDb) {
    let ids: Vec<String> = (0..10).map(|i| format!("i{i}")).collect();
    for p in 0..40 {
        db.partition_of(&format!("p{p:02}"), true, false, "block", &ids)
            .await;
    }
    let permits = Arc::new(Semaphore::new(0));
    let held = permits.clone();
    let handler = Handler::start_async(move |_| {
        let held = held.clone();
        async move {
            held.acquire().await.unwrap().forget();
            done()
        }
    })
    .await;
    let _nodes = [
        Proc::start(&db, &handler.url(), &[]),
        Proc::start(&db, &handler.url(), &[]),
    ];
    let complete = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'";
    for (step, (from, to)) in [(9701, 9702), (9702, 9701), (9701, 9702), (9702, 9701)]
        .into_iter()
        .enumerate()
    {
        permits.add_permits(80);
        let goal = 80 * (step as i64 + 1);
        wait_for(
            "the step's calls answered",
            Duration::from_secs(60),
            || async { db.count(complete).await >= goal - 20 },
        )
        .await;
        move_a_shard(&db, from, to).await;
    }
    assert!(
        db.count(complete).await < 400,
        "the moves ran during the drain"
    );
    permits.add_permits(1_000);
    wait_for("every item complete", Duration::from_secs(120), || async {
        db.count(complete).await == 400
    })
    .await;
    let written_twice = "SELECT COUNT(*) AS n FROM feed_items WHERE version <> 1";
    assert_eq!(db.count(written_twice).await, 0);
    wait_for(
        "every partition closed",
        Duration::from_secs(60),
        || async {
            db.count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'")
                .await
                == 40
        },
    )
    .await;
    let events = "SELECT COUNT(DISTINCT partition_id) AS n FROM feed_events \
                  WHERE kind = 'partition.complete'";
    assert_eq!(db.count(events).await, 40);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_events").await,
        40,
        "one event each"
    );
}
