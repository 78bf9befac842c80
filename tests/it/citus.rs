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

/// The item path's statements: the shape of each on the coordinator (as
/// `citus_stat_statements` writes it) and on a worker (a shard's query as
/// Citus writes it, in `pg_stat_statements`): the dispatch read, the
/// result write, the gate check and its next gate, the advance, the
/// close, and its event read then written.
const ITEM_PATH: [(&str, &str); 8] = [
    (
        "SELECT * FROM (SELECT i.id, i.partition_id%",
        "%UNION ALL%feed_items%",
    ),
    ("UPDATE feed_items%", "UPDATE public.feed_items\\_%"),
    ("SELECT v.*, CASE WHEN v.verdict%", "%verdict%"),
    ("SELECT p.id, (SELECT MIN(r.gate)%", "%min(r.gate)%"),
    (
        "UPDATE feed_partitions SET gate%",
        "UPDATE public.feed_partitions\\_% SET %gate = %",
    ),
    (
        "UPDATE feed_partitions SET status%",
        "UPDATE public.feed_partitions\\_% SET status%",
    ),
    ("SELECT p.id, % AS kind%", "% AS kind%"),
    (
        "INSERT INTO feed_events%",
        "INSERT INTO public.feed_events\\_%",
    ),
];

/// Calls of the statements of this database whose text is like
/// `pattern`: on the coordinator, or on the workers (their shards' queries).
async fn calls(db: &TestDb, pattern: &str, workers: bool) -> i64 {
    let this_db = "dbid = (SELECT oid FROM pg_database WHERE datname = current_database())";
    let sql = if workers {
        format!(
            "SELECT COALESCE(SUM(result::bigint), 0)::bigint AS n FROM run_command_on_workers(\
             $$SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements WHERE {this_db} \
             AND query ILIKE '{pattern}'$$)"
        )
    } else {
        format!(
            "SELECT COALESCE(SUM(calls), 0)::bigint AS n FROM citus_stat_statements \
             WHERE {this_db} AND query LIKE '{pattern}'"
        )
    };
    db.count(&sql).await
}

backend_tests!(a_drain_spreads_over_the_workers: citus => Citus [slow]);
/// 1,000 partitions of 5 items (four at gate 0, one at gate 1) drained by
/// one processor: each worker holds 35–65 % of the items, and at least 99 % of the item path's
/// statements ran on one shard: for each of them the workers ran one
/// shard's query (a statement over several shards runs one per shard).
async fn a_drain_spreads_over_the_workers(db: TestDb) {
    db.sql("SELECT citus_stat_statements_reset()").await;
    db.sql(
        "SELECT run_command_on_workers($$SELECT pg_stat_statements_reset(0, \
         (SELECT oid FROM pg_database WHERE datname = current_database()), 0)$$)",
    )
    .await;
    db.sql("INSERT INTO feed_partitions (id) SELECT 'p' || g FROM generate_series(1, 1000) g")
        .await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, gate, data) SELECT 'i' || k, 'p' || g, \
         k / 5, '\\x7b7d' FROM generate_series(1, 1000) g, generate_series(1, 5) k",
    )
    .await;
    let handler = Handler::start(|_| done()).await;
    let _proc = Proc::start(&db, &handler.url(), &[]);
    let closed = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    wait_for(
        "every partition closed",
        // Beside the whole slow tier the cluster shares the machine.
        Duration::from_secs(600),
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

    // A statement over several shards runs a query on each: the queries
    // beyond one per statement count the statements spread at most. (The
    // workers' statistics keep a bounded number of statements, shared by
    // every test's shards, so a few of their calls may be gone.)
    let (mut statements, mut spread) = (0, 0);
    let mut shapes = Vec::new();
    for (on_coordinator, on_worker) in ITEM_PATH {
        let (c, w) = (
            calls(&db, on_coordinator, false).await,
            calls(&db, on_worker, true).await,
        );
        shapes.push((on_coordinator, c, w));
        statements += c;
        spread += (w - c).max(0);
    }
    let share = 1.0 - spread as f64 / statements.max(1) as f64;
    eprintln!(
        "items per worker {per_worker:?}; the item path's statements and the shards' queries they ran: \
         {shapes:?} ({:.1} % on one shard)",
        share * 100.0
    );
    assert!(statements >= 5000, "the item path's statements: {shapes:?}");
    assert!(
        shapes.iter().all(|(_, c, w)| *w >= c / 2),
        "a statement whose shard query was not found: {shapes:?}"
    );
    assert!(
        share >= 0.99,
        "{:.1} % of the item path on one shard: {shapes:?}",
        share * 100.0
    );
}
