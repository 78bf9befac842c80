//! A tenant's limits edited while a processor runs.

use std::time::{Duration, Instant};

use crate::controls::cli;
use crate::support::{Handler, Proc, TestDb, wait_for};
use crate::tenants::{enqueue, holding, of};
use crate::timing;

/// Calls of tenant `key` per second at the handler over `span` from now.
async fn rate_over(h: &Handler, key: &str, span: Duration) -> f64 {
    let from = Instant::now();
    tokio::time::sleep(span).await;
    let n = h
        .calls()
        .iter()
        .filter(|c| c.at >= from && c.partition.starts_with(key))
        .count();
    n as f64 / span.as_secs_f64()
}

timing!(limits_edited_live_take_effect_within_a_heartbeat);
/// Limits set while a processor runs (heartbeat 200 ms): a cap inserted
/// with SQL, a rate set with `processor limits set`, and `limits clear`
/// each bind (or stop binding) within a heartbeat and the calls in flight
/// then (measured from 500 ms after the change).
async fn limits_edited_live_take_effect_within_a_heartbeat(db: TestDb) {
    for p in 0..8 {
        enqueue(&db, &format!("acme-{p}"), 1_000, of("acme")).await;
    }
    let (h, seen) = holding(Duration::from_millis(20)).await;
    let _p = Proc::start(&db, &h.url(), &["--concurrency", "16"]);
    wait_for("calls at full speed", Duration::from_secs(30), || async {
        seen.most("acme") >= 8
    })
    .await;
    let settle = Duration::from_millis(500);
    // A cap, by SQL.
    db.sql("INSERT INTO feed_limits (tenant, max_in_flight) VALUES ('acme', 3)")
        .await;
    tokio::time::sleep(settle).await;
    seen.reset();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let capped = seen.most("acme");
    // A rate instead, by the command line.
    let (ok, out) = cli(
        &db,
        &[
            "limits",
            "set",
            "--tenant",
            "acme",
            "--max-in-flight",
            "0",
            "--rate",
            "40/s",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("rate 40/s"), "{out}");
    let (ok, listed) = cli(&db, &["limits", "list"]);
    assert!(
        ok && listed.contains("acme") && listed.contains("40/s"),
        "{listed}"
    );
    tokio::time::sleep(settle).await;
    let limited = rate_over(&h, "acme", Duration::from_secs(2)).await;
    // Cleared: full speed again.
    let (ok, out) = cli(&db, &["limits", "clear", "--tenant", "acme"]);
    assert!(ok && out.contains("limits removed"), "{out}");
    tokio::time::sleep(settle).await;
    let free = rate_over(&h, "acme", Duration::from_secs(1)).await;
    eprintln!("capped at {capped} at once; rate {limited:.0}/s; cleared {free:.0}/s");
    assert!(capped <= 3, "{capped} at once under a cap of 3");
    assert!(
        (limited - 40.0).abs() <= 8.0,
        "{limited:.0}/s under a rate of 40/s"
    );
    assert!(free > 100.0, "{free:.0}/s once cleared");
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_limits").await, 0);
}
