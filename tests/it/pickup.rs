//! Pickup: an idle processor takes a new partition at once, not at its
//! next acquire cycle or poll. Every processor here polls and balances
//! only once a minute, so a partition that completes within the tests'
//! bounds was taken by a wake-up: a notification on PostgreSQL, the
//! enqueue through the processor's own API on every database.

use std::process::Stdio;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use tokio::process::Command;

use crate::cli::{enqueue_cli, text};
use crate::enqueue_api::{PRODUCER, enqueue};
use crate::support::{Handler, Proc, TestDb, done, wait_for};
use crate::{backend_tests, on_all_backends};

/// Polls and acquire cycles far apart: only a wake-up picks work up
/// within [`BOUND`]. (A long session expiry also spaces out the pings
/// of the LISTEN connection, which [`listening`] looks for by its last
/// statement.)
const SLOW: &[&str] = &[
    "--poll-interval",
    "60s",
    "--acquire-interval",
    "60s",
    "--session-expiry",
    "120s",
];

/// How long the new partition may take, well within the intervals.
const BOUND: &str = "20s";

/// Enqueues one item into each of `partitions` before any processor
/// starts: each processor's first acquire cycle leases them and its first
/// look at new items runs before it fetches any, so once they are done
/// every processor is idle and has looked once (later work is new to it).
async fn warm(db: &TestDb, partitions: &[&str]) {
    for p in partitions {
        let item = NewItem::new(&b"{}"[..]).with_id(format!("{p}/1"));
        db.store
            .enqueue(p, &PartitionSpec::default(), vec![item])
            .await
            .unwrap();
    }
}

/// Waits until `n` connections LISTEN for new items (the processors').
async fn listening(db: &TestDb, n: i64) {
    let sql = "SELECT COUNT(*) AS n FROM pg_stat_activity \
               WHERE datname = current_database() AND query = 'LISTEN \"feed_items\"'";
    wait_for(
        "the processors to LISTEN",
        Duration::from_secs(30),
        || async { db.count(sql).await == n },
    )
    .await;
}

/// `processor wait` for `partition`, at most [`BOUND`]: its exit code and output.
async fn wait(db: &TestDb, partition: &str) -> (Option<i32>, String) {
    let args = ["wait", "--database-url", &db.url, "--partition", partition];
    let o = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(args)
        .args(["--timeout", BOUND])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), out)
}

backend_tests!(a_new_partition_wakes_an_idle_processor: postgres => Postgres);
/// A partition enqueued with the command line while the processor is
/// idle: the notification of its items names a partition nobody holds,
/// and the processor claims it at once.
async fn a_new_partition_wakes_an_idle_processor(db: TestDb) {
    warm(&db, &["warm"]).await;
    let h = Handler::start(|_| done()).await;
    let p = Proc::start(&db, &h.url(), SLOW);
    db.wait_partition("warm", "complete").await;
    listening(&db, 1).await;
    let o = enqueue_cli(&db, "new", &[], "{\"id\": \"new/1\", \"data\": 1}\n");
    assert!(o.status.success(), "{}", text(&o));
    let (code, out) = wait(&db, "new").await;
    assert_eq!(code, Some(0), "{out}\n{}", p.log_tail(40));
    assert_eq!(h.calls_for("new/1").len(), 1);
}

backend_tests!(idle_processors_racing_for_a_new_partition_lease_it_once: postgres => Postgres);
/// Three idle processors, each with room for the new partition, are all
/// woken by its notification and all claim it: exactly one leases it
/// (the lease tests the owner again as it writes), and its item is sent
/// once. (`--max-partitions 1`, and each started once the one before has
/// finished its warm-up partition, share those out one each, so every
/// processor has looked at new items before.)
async fn idle_processors_racing_for_a_new_partition_lease_it_once(db: TestDb) {
    warm(&db, &["warm-a", "warm-b", "warm-c"]).await;
    let h = Handler::start(|_| done()).await;
    let flags: Vec<&str> = SLOW
        .iter()
        .copied()
        .chain(["--max-partitions", "1"])
        .collect();
    let mut procs = Vec::new();
    for n in 1..=3 {
        procs.push(Proc::start(&db, &h.url(), &flags));
        let finished = format!("{n} warm-up partitions complete");
        wait_for(&finished, Duration::from_secs(60), || async {
            db.count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'")
                .await
                == n
        })
        .await;
    }
    let mut senders: Vec<String> = h.calls().into_iter().map(|c| c.processor).collect();
    senders.sort();
    senders.dedup();
    assert_eq!(senders.len(), 3, "each processor sent one warm-up item");
    listening(&db, 3).await;
    let o = enqueue_cli(&db, "new", &[], "{\"id\": \"new/1\", \"data\": 1}\n");
    assert!(o.status.success(), "{}", text(&o));
    let (code, out) = wait(&db, "new").await;
    let logs: Vec<String> = procs.iter().map(|p| p.log_tail(20)).collect();
    assert_eq!(code, Some(0), "{out}\n{}", logs.join("\n---\n"));
    assert_eq!(h.calls_for("new/1").len(), 1, "sent once");
}

on_all_backends!(an_enqueue_through_the_api_wakes_its_own_processor);
/// On a database without notifications nothing but the processor's own
/// API can tell it at once: the enqueue wakes its dispatch loop in
/// process, and the look at new items claims the new partition.
async fn an_enqueue_through_the_api_wakes_its_own_processor(db: TestDb) {
    warm(&db, &["warm"]).await;
    let h = Handler::start(|_| done()).await;
    let flags: Vec<&str> = SLOW
        .iter()
        .copied()
        .chain(["--ui", "--producer-token", PRODUCER])
        .collect();
    let p = Proc::start(&db, &h.url(), &flags);
    db.wait_partition("warm", "complete").await;
    let base = format!("http://{}", p.listen.clone().unwrap());
    crate::support::wait_console(&base).await;
    let (code, answer) = enqueue(&base, "new", r#"[{"id": "new/1", "data": 1}]"#).await;
    assert!(code.is_success(), "{code}: {answer}");
    let (code, out) = wait(&db, "new").await;
    assert_eq!(code, Some(0), "{out}\n{}", p.log_tail(40));
    assert_eq!(h.calls_for("new/1").len(), 1);
}
