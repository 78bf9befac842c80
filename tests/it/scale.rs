//! Shapes of work at size: many one-item partitions, one big partition
//! with two gates, an acquire cycle whose cost does not grow with the
//! partitions held, batched leasing raced by a second processor.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::{Backend, Handler, Proc, Spawned, TestDb, done, metric, wait_for};
use crate::{on_all_backends, slow};

/// Creates `n` partitions `{prefix}{k}` (`auto_close` as given) and, when
/// `items` is set, one item each at gate 0, many rows per statement.
pub(crate) async fn many_partitions(
    db: &TestDb,
    prefix: &str,
    n: usize,
    auto_close: bool,
    items: bool,
) {
    let flag = if auto_close { "TRUE" } else { "FALSE" };
    for start in (0..n).step_by(500) {
        let ks: Vec<usize> = (start..n.min(start + 500)).collect();
        let rows: Vec<String> = ks
            .iter()
            .map(|k| format!("('{prefix}{k}', {flag}, FALSE, 'block')"))
            .collect();
        db.sql(&format!(
            "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure) VALUES {}",
            rows.join(", ")
        ))
        .await;
        if items {
            let rows: Vec<String> = ks
                .iter()
                .map(|k| format!("('{prefix}{k}-i', '{prefix}{k}', 0, '{{}}')"))
                .collect();
            db.sql(&format!(
                "INSERT INTO feed_items (id, partition_id, gate, data) VALUES {}",
                rows.join(", ")
            ))
            .await;
        }
    }
}

/// Waits until every partition is complete.
pub(crate) async fn all_complete(db: &TestDb) {
    let open = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status <> 'complete'";
    wait_for(
        "every partition complete",
        // 3,000 partitions took more than two minutes beside the whole
        // suite on a slow 2-core machine (debug build).
        Duration::from_secs(300),
        || async { db.count(open).await == 0 },
    )
    .await;
}

/// Asserts that the handler was called exactly once for each of `n` items.
fn each_item_called_once(handler: &Handler, n: usize) {
    let calls = handler.calls();
    let items: HashSet<&str> = calls.iter().map(|c| c.item.as_str()).collect();
    assert_eq!(items.len(), n, "every item was called");
    assert_eq!(calls.len(), n, "no item was called twice");
}

slow!(many_one_item_partitions_drain);
/// 2,000 partitions of one item each: every item runs once, every
/// partition closes, nothing is left behind.
async fn many_one_item_partitions_drain(db: TestDb) {
    many_partitions(&db, "p", 2_000, true, true).await;
    let scene = Spawned::start(&db, &[], |_| done()).await;
    all_complete(&db).await;
    each_item_called_once(&scene.0, 2_000);
    let open = "SELECT COUNT(*) AS n FROM feed_items WHERE status <> 'complete'";
    assert_eq!(db.count(open).await, 0, "no item left open");
    let owned = "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner IS NOT NULL";
    assert_eq!(db.count(owned).await, 0, "closed partitions are released");
}

on_all_backends!(partitions_of_a_dead_session_are_leased_in_pages);
/// 1,200 partitions left owned by a session that died (more than one
/// lease page, and none unowned): a new processor takes them all in pages
/// and every item runs once.
async fn partitions_of_a_dead_session_are_leased_in_pages(db: TestDb) {
    many_partitions(&db, "o", 1_200, true, true).await;
    db.sql("INSERT INTO feed_processors (id, heartbeat_at) VALUES ('dead', 0)")
        .await;
    db.sql("UPDATE feed_partitions SET owner = 'dead'").await;
    let scene = Spawned::start(&db, &[], |_| done()).await;
    all_complete(&db).await;
    each_item_called_once(&scene.0, 1_200);
    let log = strip_ansi(&scene.1.log());
    let pages = log
        .lines()
        .filter(|l| l.contains("leased partitions"))
        .filter_map(|l| l.split("partitions=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .collect::<Vec<_>>();
    assert!(pages.iter().sum::<usize>() >= 1_200, "leased: {pages:?}");
    assert!(
        pages.iter().all(|n| *n <= 500),
        "pages of at most 500: {pages:?}"
    );
}

on_all_backends!(a_partition_closed_by_hand_is_dropped_by_the_sweep);
/// A processor holds five idle partitions; one is closed by hand. It is
/// not counted in the database any more: the sweep's slice no longer
/// returns it, so the processor drops it (and says so in its metrics)
/// and holds the other four.
async fn a_partition_closed_by_hand_is_dropped_by_the_sweep(db: TestDb) {
    many_partitions(&db, "x", 5, false, false).await;
    let handler = Handler::start(|_| done()).await;
    let p = Proc::start(&db, &handler.url(), &[]);
    let held = || async { metric(&p.metrics().await, "feed_partitions_held") };
    wait_for("five partitions held", Duration::from_secs(30), || async {
        held().await == 5.0
    })
    .await;
    db.sql("UPDATE feed_partitions SET status = 'complete', owner = NULL WHERE id = 'x0'")
        .await;
    wait_for(
        "the closed partition dropped",
        Duration::from_secs(30),
        || async { held().await == 4.0 },
    )
    .await;
    assert!(metric(&p.metrics().await, "feed_leases_lost_total") >= 1.0);
}

on_all_backends!(one_big_partition_fans_in);
/// One partition of 1,500 items at gate 0 and 500 at gate 1: gate 1 runs
/// only after every gate-0 item is done, and the partition closes.
async fn one_big_partition_fans_in(db: TestDb) {
    db.partition("big", true, false, "block").await;
    let first: Vec<String> = (0..1_500).map(|k| format!("a{k}")).collect();
    let second: Vec<String> = (0..500).map(|k| format!("b{k}")).collect();
    db.items("big", 0, &first).await;
    db.items("big", 1, &second).await;
    let scene = Spawned::start(&db, &[], |_| done()).await;
    db.wait_partition("big", "complete").await;
    let calls = scene.0.calls();
    let called: HashSet<&str> = calls.iter().map(|c| c.item.as_str()).collect();
    assert_eq!(called.len(), 2_000, "every item called");
    // A call is made again only after an answer could not be stored (a
    // heartbeat that timed out on a loaded machine ends the session).
    let rejected = metric(
        &scene.1.metrics().await,
        "feed_items_total{outcome=\"rejected\"}",
    );
    assert!(
        (calls.len() - 2_000) as f64 <= rejected,
        "{} calls again, {rejected} answers rejected",
        calls.len() - 2_000
    );
    let last_gate0 = calls.iter().rposition(|c| c.gate == 0).unwrap();
    let first_gate1 = calls.iter().position(|c| c.gate == 1).unwrap();
    assert!(
        last_gate0 < first_gate1,
        "a gate-1 item ran before gate 0 was done (call {first_gate1} before {last_gate0})"
    );
}

/// Statements per acquire cycle of an idle processor holding `n` partitions.
async fn statements_per_cycle(db: &TestDb, n: usize, settled: Option<f64>) -> f64 {
    many_partitions(db, &format!("h{n}-"), n, false, false).await;
    let handler = Handler::start(|_| done()).await;
    // Polling and heartbeats rare, so that the window counts acquire cycles.
    let extra = [
        "--acquire-interval",
        "100ms",
        "--poll-interval",
        "1h",
        "--heartbeat-interval",
        "20s",
        "--session-expiry",
        "60s",
    ];
    let p = Proc::start(db, &handler.url(), &extra);
    let read = || async {
        let m = p.metrics().await;
        (
            metric(&m, "feed_statements_total"),
            metric(&m, "feed_acquire_cycles_total"),
            metric(&m, "feed_partitions_held"),
        )
    };
    wait_for(
        "every partition held and settled",
        Duration::from_secs(120),
        || async { read().await.2 == n as f64 },
    )
    .await;
    // Settled: a window of five cycles costs no more than `settled` per
    // cycle (the first refills and checks of the new partitions are over);
    // without a bound, two windows in a row cost the same.
    let mut last = f64::NAN;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (s, c, _) = read().await;
        wait_for("five more cycles", Duration::from_secs(60), || async {
            read().await.1 >= c + 5.0
        })
        .await;
        let (s2, c2, _) = read().await;
        let per = (s2 - s) / (c2 - c);
        if settled.map_or(per == last, |bound| per <= bound) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "idle cycles at {n} held still cost {per} statements each"
        );
        last = per;
    }
    // The least of three windows of twenty cycles: a statement that
    // belongs to no cycle (a heartbeat, a late refill on a loaded machine)
    // may land in one window, while a cost that grows with the partitions
    // held is in every window.
    let mut least = f64::INFINITY;
    for _ in 0..3 {
        let (s0, c0, _) = read().await;
        wait_for("twenty cycles", Duration::from_secs(60), || async {
            read().await.1 >= c0 + 20.0
        })
        .await;
        let (s1, c1, _) = read().await;
        least = least.min((s1 - s0) / (c1 - c0));
    }
    least
}

slow!(acquire_cycle_costs_the_same_at_any_size);
/// An acquire cycle runs as many statements holding 10,000 partitions as
/// holding 10: its statements are bounded, not per partition.
async fn acquire_cycle_costs_the_same_at_any_size(db: TestDb) {
    let small = statements_per_cycle(&db, 10, None).await;
    db.sql("DELETE FROM feed_partitions").await;
    db.sql("DELETE FROM feed_processors").await;
    let large = statements_per_cycle(&db, 10_000, Some(small + 0.5)).await;
    assert!(small < 8.0, "{small} statements per cycle at 10 held");
    assert!(
        (large - small).abs() < 1.0,
        "{large} statements per cycle at 10,000 held against {small} at 10"
    );
}

on_all_backends!(batched_leasing_races_a_second_processor);
/// Two processors lease 3,000 free partitions in batches. The first
/// partition's row is held locked until both processors' leases wait on
/// it: on MariaDB their batches, read before they lease, name the same
/// rows; on PostgreSQL each page is picked and taken in one statement that
/// passes over locked rows, so both race for the held one once the rest
/// are taken. No partition is leased by both, and every item runs once.
async fn batched_leasing_races_a_second_processor(db: TestDb) {
    many_partitions(&db, "r", 3_000, true, true).await;
    let txn = db
        .holding("UPDATE feed_partitions SET updated_at = updated_at WHERE id = 'r0'")
        .await;
    let handler = Handler::start(|_| done()).await;
    let a = Proc::start(&db, &handler.url(), &[]);
    let b = Proc::start(&db, &handler.url(), &[]);
    if db.backend != Backend::Sqlite {
        wait_for(
            "both processors' leases waiting on the held row",
            Duration::from_secs(90),
            || async { db.lock_waits("UPDATE feed_partitions SET owner").await >= 2 },
        )
        .await;
    }
    txn.commit().await.unwrap();
    all_complete(&db).await;
    let (la, lb) = (leased(&a.log()), leased(&b.log()));
    let both: Vec<&String> = la.intersection(&lb).collect();
    assert!(both.is_empty(), "leased by both: {both:?}");
    // A partition may also change hands by a steal, which balances the
    // two once both run (logged as such, not as a lease of a free one).
    let taken: HashSet<String> = [la, lb, stolen(&a.log()), stolen(&b.log())]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(taken.len(), 3_000, "every partition was leased");
    let calls = handler.calls();
    let items: HashSet<&str> = calls.iter().map(|c| c.item.as_str()).collect();
    assert_eq!(items.len(), 3_000, "every item was called");
}

/// The partitions a processor's log says it leased (free ones).
fn leased(log: &str) -> HashSet<String> {
    logged(log, "leased partition")
}

/// The partitions a processor's log says it stole to balance the load.
fn stolen(log: &str) -> HashSet<String> {
    logged(log, "stole partition")
}

/// The partitions named by the log lines that say `what`.
fn logged(log: &str, what: &str) -> HashSet<String> {
    let plain = strip_ansi(log);
    plain
        .lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split("partition=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `text` without terminal colour sequences.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
