//! Low rates, a tenant's and the fleet's, held by two processors: every
//! 2 s window at the handler within 10 % over the rate and 20 % under it,
//! and the windows' mean within 10 % (as `rate_limit` measures the fleet's).

use std::time::{Duration, Instant};

use crate::controls::cli;
use crate::support::{Backend, Call, Handler, Proc, TestDb, done, wait_for};
use crate::tenants::{enqueue, of};
use crate::timing;

/// The windows rates are counted over.
const WINDOW: Duration = Duration::from_secs(2);
/// Windows measured.
const WINDOWS: u32 = 4;

/// Calls whose partition starts with `key`, per `WINDOW` from `from`.
fn windows(calls: &[Call], key: &str, from: Instant) -> Vec<usize> {
    let calls: Vec<Instant> = calls
        .iter()
        .filter(|c| c.partition.starts_with(key))
        .map(|c| c.at)
        .collect();
    (0..WINDOWS)
        .map(|k| {
            let start = from + WINDOW * k;
            calls
                .iter()
                .filter(|t| **t >= start && **t < start + WINDOW)
                .count()
        })
        .collect()
}

/// What is wrong with `counts` for a rate of `rate` a second, if anything.
fn off(what: &str, rate: f64, counts: &[usize]) -> Option<String> {
    let expected = rate * WINDOW.as_secs_f64();
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    // A window may hold one item less or more than its share of the rate
    // (a token due at its edge falls on either side).
    let low = (expected * 0.8).floor().min(expected - 1.0);
    let high = (expected * 1.1).ceil().max(expected + 1.0);
    let bad_window = counts.iter().any(|n| !(low..=high).contains(&(*n as f64)));
    let bad_mean = (mean - expected).abs() / expected > 0.10;
    (bad_window || bad_mean).then(|| {
        format!("{what} at {rate}/s: {counts:?} per {WINDOW:?}, not {expected} (mean {mean})")
    })
}

/// Starts two processors for `h` with the default poll, heartbeat and
/// acquire intervals, plus `extra`: with the tests' fast ones, dispatch
/// looks at its buffer every 50 to 200 ms whatever happens, which hid a
/// processor that was not woken when its tokens came due.
fn two(db: &TestDb, h: &Handler, extra: &[&str]) -> Vec<Proc> {
    let mut args = vec![
        "--poll-interval",
        "1s",
        "--heartbeat-interval",
        "1s",
        "--acquire-interval",
        "2s",
        "--session-expiry",
        "10s",
    ];
    args.extend(extra);
    (0..2).map(|_| Proc::start(db, &h.url(), &args)).collect()
}

/// A handler that takes 1 s for the partitions of tenant `slow`, 10 ms for
/// the others.
async fn handler() -> Handler {
    Handler::start_async(|call| async move {
        let hold = if call.partition.starts_with("slow-") {
            1_000
        } else {
            10
        };
        tokio::time::sleep(Duration::from_millis(hold)).await;
        done()
    })
    .await
}

/// `processor limits set` for `tenant`.
fn set(db: &TestDb, tenant: &str, flags: &[&str]) {
    let mut args = vec!["limits", "set", "--tenant", tenant];
    args.extend(flags);
    let (ok, out) = cli(db, &args);
    assert!(ok, "{out}");
}

timing!(tenant_rates_hold_with_two_processors);
/// Tenants at 5, 50 and 200 items a second with 10 ms calls, and at 5/s
/// with 1 s calls, set with `processor limits set` before two processors
/// start, and one whose rate of 20/s is set during the drain (it went at
/// up to two calls at once before): every tenant holds its rate, measured
/// over four 2 s windows from two seconds after the change (a heartbeat
/// to read it, a second to settle). Each tenant has a database and two
/// processors of its own (in one drain, the buffer of a processor holds
/// one tenant's items while its rate holds them back, and the others'
/// wait: dispatch, not the rates), three tenants at once, then two (ten
/// processors at once would take most of PostgreSQL's 100 connections).
async fn tenant_rates_hold_with_two_processors(db: TestDb) {
    let backend = db.backend;
    let h = handler().await;
    let first = [("r5", 5.0), ("r50", 50.0), ("slow", 5.0)];
    let mut wrong = drain(&h, backend, vec![db], &first).await;
    let second = [("r200", 200.0), ("r20", 20.0)];
    wrong.extend(drain(&h, backend, vec![], &second).await);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Drains `tenants` (name, rate) at once, each in a database of its own
/// (`dbs`, then new ones on `backend`) with two processors; the tenant `r20` is capped
/// at two calls at once and given its rate during the drain. Returns what
/// did not hold.
async fn drain(
    h: &Handler,
    backend: Backend,
    mut dbs: Vec<TestDb>,
    tenants: &[(&str, f64)],
) -> Vec<String> {
    while dbs.len() < tenants.len() {
        dbs.push(TestDb::new(backend).await.unwrap());
    }
    let mut procs = Vec::new();
    for ((tenant, rate), db) in tenants.iter().zip(&dbs) {
        if *tenant == "r20" {
            set(db, tenant, &["--max-in-flight", "2"]);
        } else {
            set(db, tenant, &["--rate", &format!("{rate}/s")]);
        }
        procs.extend(two(db, h, &["--concurrency", "8"]));
    }
    // Work once both processors are live, so each leases half of it.
    for db in &dbs {
        wait_for("two sessions", Duration::from_secs(60), || async {
            db.sessions().await.len() == 2
        })
        .await;
    }
    for ((tenant, rate), db) in tenants.iter().zip(&dbs) {
        // Enough work for the whole test at the rate (r20 goes at up to
        // 200/s before its rate is set).
        let per = match *tenant {
            "r20" => 500,
            _ => ((rate * 20.0) as usize).max(100) / 4,
        };
        for p in 0..4 {
            enqueue(db, &format!("{tenant}-{p}"), per, of(tenant)).await;
        }
    }
    wait_for("every tenant called", Duration::from_secs(30), || async {
        let calls = h.calls();
        tenants
            .iter()
            .all(|(t, _)| calls.iter().any(|c| c.partition.starts_with(t)))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for ((tenant, _), db) in tenants.iter().zip(&dbs) {
        if *tenant == "r20" {
            set(db, tenant, &["--max-in-flight", "0", "--rate", "20/s"]);
        }
    }
    // Read within a heartbeat (1 s).
    let from = Instant::now() + Duration::from_secs(2);
    tokio::time::sleep(WINDOW * WINDOWS + Duration::from_secs(2)).await;
    let calls = h.calls();
    drop(procs);
    let mut wrong = Vec::new();
    for (tenant, rate) in tenants {
        let key = format!("{tenant}-");
        let counts = windows(&calls, &key, from);
        let senders: std::collections::HashSet<&str> = calls
            .iter()
            .filter(|c| c.partition.starts_with(&key))
            .map(|c| c.processor.as_str())
            .collect();
        eprintln!(
            "tenant {tenant} at {rate}/s: {counts:?} per {WINDOW:?}, from {} processors",
            senders.len()
        );
        wrong.extend(off(tenant, *rate, &counts));
        if senders.len() != 2 {
            wrong.push(format!("{tenant}: {} processors sent", senders.len()));
        }
    }
    wrong
}

timing!(a_low_fleet_rate_holds_with_two_processors);
/// `--rate-limit 10/s` on two processors, 10 ms calls spread over eight
/// partitions: the fleet holds 10 items a second, measured over four 2 s
/// windows after a 2 s warm-up.
async fn a_low_fleet_rate_holds_with_two_processors(db: TestDb) {
    let h = handler().await;
    let procs = two(&db, &h, &["--rate-limit", "10/s"]);
    wait_for("two sessions", Duration::from_secs(60), || async {
        db.sessions().await.len() == 2
    })
    .await;
    for p in 0..8 {
        enqueue(&db, &format!("fleet-{p}"), 40, Default::default()).await;
    }
    wait_for("a first call", Duration::from_secs(30), || async {
        !h.calls().is_empty()
    })
    .await;
    let from = Instant::now() + Duration::from_secs(2);
    tokio::time::sleep(WINDOW * WINDOWS + Duration::from_secs(2)).await;
    let counts = windows(&h.calls(), "fleet-", from);
    drop(procs);
    eprintln!("fleet at 10/s: {counts:?} per {WINDOW:?}");
    if let Some(e) = off("the fleet", 10.0, &counts) {
        panic!("{e}");
    }
}

timing!(tenants_at_different_rates_share_a_processor);
/// Tenants at 5 and 200 items a second in one database, served by the
/// same processor: the slow tenant's items held back in its buffer do not
/// keep the fast tenant's out (they filled it, and 200/s got no call for
/// seconds at a time): both hold their rates.
async fn tenants_at_different_rates_share_a_processor(db: TestDb) {
    let h = handler().await;
    set(&db, "r5", &["--rate", "5/s"]);
    set(&db, "r200", &["--rate", "200/s"]);
    let mut procs = two(&db, &h, &["--concurrency", "8"]);
    procs.truncate(1);
    wait_for("one session", Duration::from_secs(30), || async {
        db.sessions().await.len() == 1
    })
    .await;
    for p in 0..4 {
        enqueue(&db, &format!("r5-{p}"), 50, of("r5")).await;
        enqueue(&db, &format!("r200-{p}"), 700, of("r200")).await;
    }
    wait_for("both tenants called", Duration::from_secs(30), || async {
        let calls = h.calls();
        ["r5-", "r200-"]
            .iter()
            .all(|t| calls.iter().any(|c| c.partition.starts_with(t)))
    })
    .await;
    // Measured after the slow tenant's items had time to pile up.
    let from = Instant::now() + Duration::from_secs(6);
    tokio::time::sleep(WINDOW * WINDOWS + Duration::from_secs(6)).await;
    let calls = h.calls();
    drop(procs);
    let mut wrong = Vec::new();
    for (tenant, rate) in [("r5", 5.0), ("r200", 200.0)] {
        let counts = windows(&calls, &format!("{tenant}-"), from);
        eprintln!("tenant {tenant} at {rate}/s beside the other: {counts:?} per {WINDOW:?}");
        wrong.extend(off(tenant, rate, &counts));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
