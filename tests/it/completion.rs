//! Knowing when work is done: `processor wait` (exit code by outcome,
//! woken by notification on PostgreSQL) and `processor export` (a
//! partition's items as JSON lines in write order, in bounded memory,
//! which `enqueue` reads back).

use std::process::Stdio;
use std::time::{Duration, Instant};

use feed::store::{NewItem, PartitionSpec};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use reqwest::StatusCode;

use crate::cli::processor;
use crate::console_api::{TOKEN, get, post, serve};
use crate::support::{Spawned, TestDb, done, wait_for};
use crate::{backend_tests, behaviour, slow};

/// `processor wait` for `partition` with `extra` flags, started now.
fn wait(db: &TestDb, partition: &str, extra: &[&str]) -> tokio::process::Child {
    Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["wait", "--database-url", &db.url, "--partition", partition])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The exit code and output of a wait.
async fn outcome(child: tokio::process::Child) -> (Option<i32>, String) {
    let o = child.wait_with_output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

behaviour!(wait_exits_by_outcome);
/// 0 complete, 1 failed, 2 cancelled, 3 timed out, 4 unknown partition;
/// the final counts printed, as JSON with `--json`.
async fn wait_exits_by_outcome(db: TestDb) {
    db.partition_of("ok", true, false, "block", &["ok/1", "ok/2"])
        .await;
    db.partition_of("bad", true, false, "block", &["bad/1"])
        .await;
    db.partition_of("gone", true, false, "block", &["gone/1"])
        .await;
    db.sql("UPDATE feed_partitions SET paused = TRUE WHERE id IN ('bad', 'gone')")
        .await;
    let ok = wait(&db, "ok", &["--timeout", "60s", "--json"]);
    let bad = wait(&db, "bad", &["--timeout", "60s"]);
    let gone = wait(&db, "gone", &["--timeout", "60s"]);
    let _scene = Spawned::start(&db, &[], |_| done()).await;
    let (code, text) = outcome(ok).await;
    assert_eq!(code, Some(0), "{text}");
    // The JSON on stdout, then the line on stderr that names the database.
    let out: Value = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        (&out["status"], &out["finished"], &out["counts"]["complete"]),
        (&json!("complete"), &json!(true), &json!(2)),
        "{text}"
    );
    db.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'bad/1'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'failed' WHERE id = 'bad'")
        .await;
    let (code, text) = outcome(bad).await;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("partition bad failed: 0 complete, 1 failed"),
        "{text}"
    );
    assert!(
        text.contains("1 item failed; `processor retry --partition bad` tries again"),
        "what to do: {text}"
    );
    let o = processor(
        &["cancel", "--database-url", &db.url, "--partition", "gone"],
        "",
    );
    assert!(o.status.success());
    let (code, text) = outcome(gone).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("1 cancelled"), "{text}");
    // Created paused, before its item is written: the running processor
    // can neither close it empty nor finish it in between.
    db.sql("INSERT INTO feed_partitions (id, paused) VALUES ('open', TRUE)")
        .await;
    db.items("open", 0, &["open/1"]).await;
    let (code, text) = outcome(wait(&db, "open", &["--timeout", "300ms"])).await;
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("not finished (available)"), "{text}");
    assert!(
        text.contains("partition open is paused: `processor resume --partition open`"),
        "why: {text}"
    );
    let (code, text) = outcome(wait(&db, "nope", &[])).await;
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("not found: partition nope"), "{text}");
}

backend_tests!(wait_is_woken_by_notification: postgres => Postgres);
/// With a poll interval of an hour, only the notification sent with the
/// partition's event (here a cancel's) can end the wait; it does so at once.
async fn wait_is_woken_by_notification(db: TestDb) {
    db.partition_of("p", true, false, "block", &["p/1"]).await;
    let child = wait(&db, "p", &["--poll-interval", "1h"]);
    let listening = "SELECT COUNT(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND query = 'LISTEN \"feed_events\"'";
    wait_for("the wait to LISTEN", Duration::from_secs(30), || async {
        db.count(listening).await == 1
    })
    .await;
    let start = Instant::now();
    db.store.cancel("p").await.unwrap();
    let (code, text) = outcome(child).await;
    let took = start.elapsed();
    assert_eq!(code, Some(2), "cancelled: {text}");
    eprintln!("wait woke {took:?} after the close");
    assert!(took < Duration::from_secs(5), "woken by the poll? {took:?}");
}

/// Items in the big export.
const BIG: usize = 100_000;

slow!(export_streams_in_bounded_memory_and_round_trips);
/// 100,000 items stream out in write order while the exporter's peak RSS
/// stays under 100 MiB, and `enqueue` reads the output back into a new
/// partition with the same gates and data.
async fn export_streams_in_bounded_memory_and_round_trips(db: TestDb) {
    // Written in an order their ids do not sort in.
    let items: Vec<NewItem> = (0..BIG)
        .map(|n| {
            let id = format!("{:06}", (n * 7919) % BIG);
            NewItem::new(format!("{{\"n\":{n}}}").into_bytes())
                .with_id(id)
                .at_gate((n % 3) as i64)
        })
        .collect();
    db.store
        .enqueue("big", &PartitionSpec::default(), items)
        .await
        .unwrap();
    db.sql("UPDATE feed_items SET status = 'failed', last_error = 'no' WHERE id = '000000'")
        .await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["export", "--database-url", &db.url, "--partition", "big"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let peak = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut out, mut high) = (String::new(), 0.0f64);
    let mut n = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["data"]["n"], json!(n), "write order: {line}");
        if n % 10_000 == 0 {
            high = high.max(peak().unwrap_or(0.0));
        }
        out.push_str(&line);
        out.push('\n');
        n += 1;
    }
    high = high.max(peak().unwrap_or(0.0));
    assert!(child.wait().await.unwrap().success());
    assert_eq!(n, BIG);
    eprintln!("export of {BIG} items: peak RSS {high:.1} MiB");
    assert!(high > 0.0 && high < 100.0, "peak RSS {high} MiB");
    assert!(out.starts_with(
        "{\"id\":\"000000\",\"gate\":0,\"status\":\"failed\",\"attempts\":0,\"last_error\":\"no\",\"data\":{\"n\":0}}\n"
    ));
    // Filters.
    let args = ["export", "--database-url", &db.url, "--partition", "big"];
    let failed = processor(&[&args[..], &["--status", "failed"]].concat(), "");
    assert_eq!(String::from_utf8_lossy(&failed.stdout).lines().count(), 1);
    let gate2 = processor(&[&args[..], &["--gate", "2"]].concat(), "");
    assert_eq!(
        String::from_utf8_lossy(&gate2.stdout).lines().count(),
        BIG / 3
    );
    let none = processor(
        &["export", "--database-url", &db.url, "--partition", "nope"],
        "",
    );
    assert_eq!(none.status.code(), Some(1));
    // Round trip into a new partition.
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &db.url,
            "--partition",
            "copy",
            "--id-prefix",
            "c-",
        ],
        &out,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let copy = processor(
        &["export", "--database-url", &db.url, "--partition", "copy"],
        "",
    );
    let copy = String::from_utf8_lossy(&copy.stdout).into_owned();
    let strip = |line: &str, prefix: &str| {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let id = v["id"]
            .as_str()
            .unwrap()
            .strip_prefix(prefix)
            .unwrap()
            .to_string();
        (id, v["gate"].take(), v["data"].take())
    };
    let (a, b): (Vec<_>, Vec<_>) = (
        out.lines().map(|l| strip(l, "")).collect(),
        copy.lines().map(|l| strip(l, "c-")).collect(),
    );
    assert_eq!(a.len(), BIG);
    assert!(
        a == b,
        "the copy has the same ids, gates and data in the same order"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = 'copy' AND status = 'available'")
            .await,
        BIG as i64,
        "copied items start over"
    );
}

behaviour!(export_and_events_over_the_api);
/// `items.ndjson` streams what `export` writes, over several pages and
/// filtered; `/events` lists the events and `/events/retry` (admin token)
/// puts failed ones back.
async fn export_and_events_over_the_api(db: TestDb) {
    let n = feed::store::export::PAGE * 2 + 7;
    let items: Vec<NewItem> = (0..n)
        .map(|i| NewItem::new(format!("{{\"n\":{i}}}").into_bytes()).with_id(format!("i{i:05}")))
        .collect();
    db.store
        .enqueue("p", &PartitionSpec::default(), items)
        .await
        .unwrap();
    db.sql("UPDATE feed_items SET status = 'complete' WHERE id IN ('i00001', 'i00600')")
        .await;
    let base = serve(db.store.clone(), Some(TOKEN)).await;
    let r = reqwest::get(format!("{base}/api/v1/partitions/p/items.ndjson"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let cli = processor(
        &["export", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    assert_eq!(
        text,
        String::from_utf8_lossy(&cli.stdout),
        "the same lines as the CLI"
    );
    assert_eq!(text.lines().count(), n);
    let done = reqwest::get(format!(
        "{base}/api/v1/partitions/p/items.ndjson?status=complete"
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    let ids: Vec<String> = done
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["i00001", "i00600"]);
    let (code, body) = get(&base, "/api/v1/partitions/nope/items.ndjson").await;
    assert_eq!(code, 404, "{body}");
    // Events: one failed, listed, then retried with the admin token only.
    db.store.cancel("p").await.unwrap();
    db.sql("UPDATE feed_events SET status = 'failed', attempts = 3")
        .await;
    let (code, list) = get(&base, "/api/v1/events?status=failed").await;
    assert_eq!(code, 200);
    assert_eq!(list[0]["kind"], json!("partition.cancelled"));
    assert_eq!(list[0]["counts"]["cancelled"], json!(n - 2));
    let (code, _) = post(&base, "/api/v1/events/retry", None, None).await;
    assert_eq!(code, 401);
    let (code, r) = post(
        &base,
        "/api/v1/events/retry",
        Some(TOKEN),
        Some(json!({"partition": "p"})),
    )
    .await;
    assert_eq!((code, r), (StatusCode::OK, json!({"retried": 1})));
    let (_, list) = get(&base, "/api/v1/events?partition=p").await;
    assert_eq!(
        (&list[0]["status"], &list[0]["attempts"]),
        (&json!("pending"), &json!(0))
    );
    let (_, s) = get(&base, "/api/v1/status").await;
    assert_eq!(
        (&s["events_pending"], &s["events_failed"]),
        (&json!(1), &json!(0))
    );
}
