//! Citus's own operations while Feed drains: a shard moved between the
//! workers, and a worker added and the shards rebalanced onto it. Nothing
//! is lost, nothing is applied twice, and the longest stretch without an
//! answered call while the operation runs is printed (the pause).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testkit::db::CITUS_SPARE;
use tokio::sync::Semaphore;

use crate::backend_tests;
use crate::support::{Handler, Proc, TestDb, done, wait_for};

const PARTITIONS: i64 = 40;
const ITEMS: i64 = 25;
const COMPLETE: &str = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'complete'";

/// Two processors drain 40 partitions of 25 items through a handler that
/// answers only as the test lets it, noting when it answers.
struct Drain<'a> {
    db: &'a TestDb,
    permits: Arc<Semaphore>,
    answered: Arc<Mutex<Vec<Instant>>>,
    _handler: Handler,
    _nodes: [Proc; 2],
}

impl<'a> Drain<'a> {
    async fn start(db: &'a TestDb) -> Drain<'a> {
        let ids: Vec<String> = (0..ITEMS).map(|i| format!("i{i}")).collect();
        for p in 0..PARTITIONS {
            db.partition_of(&format!("p{p:02}"), true, false, "block", &ids)
                .await;
        }
        let permits = Arc::new(Semaphore::new(0));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let (held, noted) = (permits.clone(), answered.clone());
        let handler = Handler::start_async(move |_| {
            let (held, noted) = (held.clone(), noted.clone());
            async move {
                held.acquire().await.unwrap().forget();
                noted.lock().unwrap().push(Instant::now());
                done()
            }
        })
        .await;
        // Calls wait for the test's permits as long as it likes: none
        // times out, so the handler never looks absent.
        let patient = ["--request-timeout", "10m"];
        let nodes = [
            Proc::start(db, &handler.url(), &patient),
            Proc::start(db, &handler.url(), &patient),
        ];
        Drain {
            db,
            permits,
            answered,
            _handler: handler,
            _nodes: nodes,
        }
    }

    /// Lets `n` more calls be answered and waits until all but a few of
    /// them are written (the rest stay in flight). An answer for a
    /// partition whose lease moved meanwhile (the second processor takes
    /// its share) is not written: while the count falls short and every
    /// permit is used, one more is given.
    async fn release(&self, n: usize) {
        let goal = self.db.count(COMPLETE).await + n as i64 - 20;
        self.permits.add_permits(n);
        wait_for("the calls answered", Duration::from_secs(120), || async {
            let written = self.db.count(COMPLETE).await;
            if written < goal && self.permits.available_permits() == 0 {
                self.permits.add_permits(1);
            }
            written >= goal
        })
        .await;
    }

    /// Runs `operation` while letting calls through at 100 a second (at
    /// most `budget` of them); how long it took, and the longest time
    /// without an answered call while calls were let through.
    async fn during(
        &self,
        budget: usize,
        operation: impl Future<Output = ()>,
    ) -> (Duration, Duration) {
        let permits = self.permits.clone();
        let started = Instant::now();
        let pacer = tokio::spawn(async move {
            for _ in 0..budget / 5 {
                permits.add_permits(5);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Instant::now()
        });
        operation.await;
        let ended = Instant::now();
        let paced_until = if pacer.is_finished() {
            pacer.await.unwrap_or(ended).min(ended)
        } else {
            pacer.abort();
            ended
        };
        (ended - started, self.longest_gap(started, paced_until))
    }

    /// The longest time without an answered call between `from` and `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let answered = self.answered.lock().unwrap();
        let mut times: Vec<Instant> = answered
            .iter()
            .copied()
            .filter(|t| *t > from && *t < to)
            .collect();
        times.sort();
        let edges = std::iter::once(from)
            .chain(times)
            .chain(std::iter::once(to));
        let edges: Vec<Instant> = edges.collect();
        edges
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    /// Lets every call through; each item completes with its result
    /// written once (version 1), and each partition closes with one event.
    async fn finish(self) {
        self.permits.add_permits(10_000);
        let db = self.db;
        wait_for("every item complete", Duration::from_secs(120), || async {
            db.count(COMPLETE).await == PARTITIONS * ITEMS
        })
        .await;
        let written_twice = "SELECT COUNT(*) AS n FROM feed_items WHERE version <> 1";
        assert_eq!(db.count(written_twice).await, 0);
        let closed = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
        wait_for(
            "every partition closed",
            Duration::from_secs(60),
            || async { db.count(closed).await == PARTITIONS },
        )
        .await;
        let events = "SELECT COUNT(DISTINCT partition_id) AS n FROM feed_events \
                      WHERE kind = 'partition.complete'";
        assert_eq!(db.count(events).await, PARTITIONS);
        let all = "SELECT COUNT(*) AS n FROM feed_events";
        assert_eq!(db.count(all).await, PARTITIONS, "one event each");
    }
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

/// Changes the cluster's nodes (`citus_add_node`, `citus_remove_node`…).
/// Citus may answer "tuple concurrently deleted" or "updated" while its
/// maintenance daemon touches the node catalog at the same moment: the
/// change is tried again, as an operator would.
pub(crate) async fn change_nodes(db: &TestDb, sql: &str) {
    let busy = |e: &sea_orm::DbErr| e.to_string().contains("concurrently");
    db.retried(sql, vec![], busy).await;
}

/// The ports of the nodes holding shards of the partitions' table.
pub(crate) async fn shard_ports(db: &TestDb) -> Vec<i32> {
    db.rows(
        "SELECT DISTINCT p.nodeport AS port FROM pg_dist_shard s \
         JOIN pg_dist_shard_placement p ON p.shardid = s.shardid \
         WHERE s.logicalrelid = 'feed_partitions'::regclass ORDER BY 1",
        &["port"],
    )
    .await
}

backend_tests!(a_drain_goes_on_while_shards_move: citus => Citus [slow]);
/// Four shard moves, back and forth between the workers, each with calls
/// in flight.
async fn a_drain_goes_on_while_shards_move(db: TestDb) {
    let drain = Drain::start(&db).await;
    for (from, to) in [(9701, 9702), (9702, 9701), (9701, 9702), (9702, 9701)] {
        drain.release(40).await;
        let (took, pause) = drain.during(100, move_a_shard(&db, from, to)).await;
        eprintln!("shard move {from} -> {to}: {took:?}, longest without an answer {pause:?}");
    }
    assert!(
        db.count(COMPLETE).await < PARTITIONS * ITEMS,
        "the moves ran during the drain"
    );
    drain.finish().await;
}

backend_tests!(a_drain_goes_on_while_a_new_worker_takes_shards: citus => Citus [slow]);
/// A third worker is added and the shards rebalanced onto it while calls
/// are answered: the drain goes on, and the new worker holds shards.
async fn a_drain_goes_on_while_a_new_worker_takes_shards(db: TestDb) {
    let drain = Drain::start(&db).await;
    drain.release(100).await;
    change_nodes(
        &db,
        &format!("SELECT citus_add_node('127.0.0.1', {CITUS_SPARE})"),
    )
    .await;
    let rebalance = async {
        db.sql("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
            .await;
        db.sql("SELECT citus_rebalance_wait()").await;
    };
    let (took, pause) = drain.during(500, rebalance).await;
    eprintln!("rebalance onto a third worker: {took:?}, longest without an answer {pause:?}");
    assert!(
        db.count(COMPLETE).await < PARTITIONS * ITEMS,
        "the rebalance ran during the drain"
    );
    assert_eq!(shard_ports(&db).await, [9701, 9702, i32::from(CITUS_SPARE)]);
    drain.finish().await;
}
