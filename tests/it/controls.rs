//! Operator controls from the command line against a running processor:
//! pause and resume, cancel with a late result, manual checkpoints, retry
//! of one item, and quiet exits on a closed pipe.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::cli::processor;
use crate::console_api::enqueue;
use crate::support::{Backend, Handler, InProcess, Proc, TestDb, done, metric, no_retry, wait_for};
use crate::{behaviour, on_all_backends};

const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs a command against `db`; returns (success, stdout + stderr).
pub(crate) fn cli(db: &TestDb, args: &[&str]) -> (bool, String) {
    let mut all = args.to_vec();
    all.extend(["--database-url", &db.url]);
    let o = processor(&all, "");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// A handler that answers `done` once a permit is released for the call.
async fn gated_handler() -> (Handler, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let h = Handler::start_async(move |_call| {
        let g = g.clone();
        async move {
            g.acquire().await.unwrap().forget();
            done()
        }
    })
    .await;
    (h, gate)
}

behaviour!(pause_holds_work_and_resume_continues);
async fn pause_holds_work_and_resume_continues(db: TestDb) {
    enqueue(&db, "p", false, &[("p/1", 0), ("p/2", 0)]).await;
    enqueue(&db, "other", false, &[("o/1", 0)]).await;
    let (ok, out) = cli(&db, &["pause", "--all"]);
    assert!(ok && out.contains("2 partitions paused"), "{out}");
    let (ok, out) = cli(&db, &["resume", "--partition", "other"]);
    assert!(ok && out.contains("partition other resumed"), "{out}");
    let InProcess(h, _proc) = InProcess::start(&db, |_| done()).await;
    db.wait_partition("other", "complete").await;
    wait_for("p held", MINUTE, || async {
        db.partition_row("p").await.2.is_some()
    })
    .await;
    // A partition leased after p was, and worked to the end: every poll that
    // served it also covered p, and left p alone.
    enqueue(&db, "later", false, &[("l/1", 0)]).await;
    db.wait_partition("later", "complete").await;
    assert!(
        h.calls().iter().all(|c| c.partition != "p"),
        "a paused partition was dispatched"
    );
    let status: serde_json::Value = serde_json::from_slice(
        &processor(
            &[
                "status",
                "--json",
                "--partition",
                "p",
                "--database-url",
                &db.url,
            ],
            "",
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(status["partitions"][0]["paused"], true);
    let (ok, out) = cli(&db, &["resume", "--all"]);
    assert!(ok && out.contains("1 partition resumed"), "{out}");
    db.wait_partition("p", "complete").await;
    assert_eq!(h.calls_for("p/1").len(), 1);
}

behaviour!(backlog_gauge_counts_held_items);
async fn backlog_gauge_counts_held_items(db: TestDb) {
    enqueue(&db, "p", false, &[("p/1", 0), ("p/2", 0), ("p/3", 0)]).await;
    let (ok, out) = cli(&db, &["pause", "--partition", "p"]);
    assert!(ok, "{out}");
    let InProcess(_h, p) = InProcess::start(&db, |_| done()).await;
    // The first cycle holds nothing when it counts; the next one counts
    // the paused partition it leased rather than wait out the 30 s
    // between counts (cycles here are 200 ms apart).
    let within = std::time::Duration::from_secs(15);
    wait_for(
        "the backlog gauge counts p's three items",
        within,
        || async { metric(&p.metrics().await, "feed_backlog_items") == 3.0 },
    )
    .await;
}

on_all_backends!(paused_in_flight_call_is_written);
async fn paused_in_flight_call_is_written(db: TestDb) {
    enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let (h, gate) = gated_handler().await;
    let _proc = Proc::start(&db, &h.url(), &[]);
    wait_for("p/1 in flight", MINUTE, || async {
        !h.calls_for("p/1").is_empty()
    })
    .await;
    let (ok, out) = cli(&db, &["pause", "--partition", "p"]);
    assert!(ok, "{out}");
    gate.add_permits(1);
    wait_for("p/1 complete", MINUTE, || async {
        db.item_row("p/1").await.status == "complete"
    })
    .await;
}

on_all_backends!(cancel_rejects_late_results);
async fn cancel_rejects_late_results(db: TestDb) {
    enqueue(&db, "c", false, &[("c/1", 0), ("c/2", 0)]).await;
    let (h, gate) = gated_handler().await;
    let proc = Proc::start(&db, &h.url(), &["--concurrency", "1"]);
    wait_for("c/1 in flight", MINUTE, || async {
        !h.calls_for("c/1").is_empty()
    })
    .await;
    let (ok, out) = cli(&db, &["cancel", "--partition", "c"]);
    assert!(ok && out.contains("cancelled"), "{out}");
    assert_eq!(db.partition_row("c").await, ("cancelled".into(), 0, None));
    gate.add_permits(100);
    wait_for("the late result rejected", MINUTE, || async {
        metric(
            &proc.metrics().await,
            "feed_items_total{outcome=\"rejected\"}",
        ) >= 1.0
    })
    .await;
    for id in ["c/1", "c/2"] {
        assert_eq!(db.item_row(id).await.status, "cancelled", "{id}");
    }
    let (ok, out) = cli(&db, &["cancel", "--partition", "c"]);
    assert!(ok, "cancel is idempotent: {out}");
    let (ok, out) = cli(&db, &["cancel", "--partition", "nope"]);
    assert!(!ok && out.contains("not found"), "{out}");
}

behaviour!(manual_checkpoint_from_the_cli);
async fn manual_checkpoint_from_the_cli(db: TestDb) {
    enqueue(&db, "m", true, &[("m/1", 0), ("m/2", 1)]).await;
    let (ok, out) = cli(&db, &["checkpoint", "--partition", "m", "--gate", "1"]);
    assert!(!ok && out.contains("still has available items"), "{out}");
    let InProcess(_h, _proc) = InProcess::start(&db, |_| done()).await;
    wait_for("m/1 complete", MINUTE, || async {
        db.item_row("m/1").await.status == "complete"
    })
    .await;
    let (ok, out) = cli(&db, &["checkpoint", "--partition", "m", "--gate", "1"]);
    assert!(ok && out.contains("advanced to gate 1"), "{out}");
    db.wait_partition("m", "complete").await;
    let (ok, out) = cli(&db, &["checkpoint", "--partition", "m", "--gate", "0"]);
    assert!(!ok && out.contains("complete"), "{out}");
}

behaviour!(retry_one_item_from_the_cli);
async fn retry_one_item_from_the_cli(db: TestDb) {
    enqueue(&db, "r", false, &[("r/1", 0), ("r/2", 0)]).await;
    let failed_once = std::sync::atomic::AtomicBool::new(false);
    let InProcess(_h, _proc) = InProcess::start(&db, move |c| {
        if c.item == "r/1" && !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            no_retry(500, "boom")
        } else {
            done()
        }
    })
    .await;
    db.wait_partition("r", "failed").await;
    let (ok, out) = cli(&db, &["retry", "--item", "r/2"]);
    assert!(!ok && out.contains("not failed"), "{out}");
    let (ok, out) = cli(&db, &["retry", "--item", "r/1"]);
    assert!(ok && out.contains("item r/1 back to available"), "{out}");
    db.wait_partition("r", "complete").await;
}

/// `processor status --json | head -1` exits quietly (it used to panic).
#[tokio::test]
async fn closed_pipe_is_quiet() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    for n in 0..400 {
        db.partition(
            &format!("partition-with-a-long-name-{n:04}"),
            true,
            false,
            "block",
        )
        .await;
    }
    let cmd = format!(
        "set -o pipefail; {} status --json --database-url '{}' | head -1",
        env!("CARGO_BIN_EXE_processor"),
        db.url
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &cmd])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "{\n");
    // Only the line that says which database it read; no panic.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.lines().all(|l| l.starts_with("database: ")),
        "{stderr}"
    );
    assert!(o.status.success(), "{o:?}");
}

/// The Grafana dashboard in contrib/ only queries series a processor exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grafana_dashboard_uses_exported_metrics() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let InProcess(_h, proc) = InProcess::start(&db, |_| done()).await;
    wait_for("metrics", MINUTE, || async {
        proc.metrics().await.contains("feed_sessions_alive")
    })
    .await;
    let exported = proc.metrics().await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contrib/grafana-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("feed_") {
                    let series = word.trim_end_matches("_bucket");
                    assert!(
                        exported.contains(&format!("# TYPE {}", series.trim_end_matches("_total"))),
                        "{series} is not exported"
                    );
                    names += 1;
                }
            }
        }
    }
    assert!(names >= 10);
}
