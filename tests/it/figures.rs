//! The figures operators watch, from a running processor: the queue wait
//! (`feed_queue_wait_seconds`) counts from the moment an item became
//! ready (and latency and outcomes are counted by tenant too), so an item behind its gate or scheduled for later does not show
//! its whole life as waiting; the backlog by tenant is counted by one
//! processor of the fleet and agrees with `/api/v1/status` and
//! `processor status`.

use std::sync::Arc;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use serde_json::json;
use tokio::sync::Notify;

use crate::behaviour;
use crate::cli::processor;
use crate::console_api::get;
use crate::support::{Handler, Proc, TestDb, done, metric, wait_console, wait_for};
use crate::tenants::of;

/// The queue wait series of `tenant` in `text`: the count, and how many
/// waited at most `le` seconds (a bucket bound as Prometheus prints it).
fn waits(text: &str, tenant: &str, le: &str) -> (f64, f64) {
    (
        metric(
            text,
            &format!("feed_queue_wait_seconds_count{{tenant=\"{tenant}\"}}"),
        ),
        metric(
            text,
            &format!("feed_queue_wait_seconds_bucket{{le=\"{le}\",tenant=\"{tenant}\"}}"),
        ),
    )
}

behaviour!(queue_wait_counts_from_the_moment_an_item_became_ready);
/// `first` (gate 0) takes 4 s at the handler; `second`, written with it
/// at gate 1, is ready only when the gate opens; `later` is scheduled 4 s
/// ahead. Each waited under 2 s from the moment it became ready, although
/// `second` and `later` were written 4 s before they went.
async fn queue_wait_counts_from_the_moment_an_item_became_ready(db: TestDb) {
    let h = Handler::start_async(|c| async move {
        if c.item == "first" {
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        done()
    })
    .await;
    let p = Proc::start(&db, &h.url(), &["--request-timeout", "30s"]);
    db.store
        .enqueue(
            "p",
            &of("acme"),
            vec![
                NewItem::new(b"{}".to_vec()).with_id("first"),
                NewItem::new(b"{}".to_vec()).with_id("second").at_gate(1),
            ],
        )
        .await
        .unwrap();
    let due = db.store.now_ms().await.unwrap() + 4_000;
    db.store
        .enqueue(
            "q",
            &PartitionSpec::default(),
            vec![
                NewItem::new(b"{}".to_vec())
                    .with_id("later")
                    .not_before(due),
            ],
        )
        .await
        .unwrap();
    db.wait_complete(3).await;
    let text = p.metrics().await;
    assert_eq!(waits(&text, "acme", "2.048"), (2.0, 2.0), "{text}");
    assert_eq!(waits(&text, "", "2.048"), (1.0, 1.0), "{text}");
    // Latency and outcomes by tenant: acme's two calls, one of 4 s.
    let acme = |s: &str| metric(&text, &format!("feed_tenant_{s}"));
    assert_eq!(
        acme("items_total{tenant=\"acme\",outcome=\"done\"}"),
        2.0,
        "{text}"
    );
    assert_eq!(
        acme("items_total{tenant=\"\",outcome=\"done\"}"),
        1.0,
        "{text}"
    );
    let latency = "handler_request_duration_seconds";
    assert_eq!(
        acme(&format!("{latency}_count{{tenant=\"acme\"}}")),
        2.0,
        "{text}"
    );
    assert!(
        acme(&format!("{latency}_sum{{tenant=\"acme\"}}")) >= 4.0,
        "{text}"
    );
}

behaviour!(the_backlog_is_counted_by_one_processor_and_agrees_everywhere);
/// Two processors, one call at a time each, a handler that holds every
/// call: of tenant acme's six items one is scheduled an hour ahead and
/// one waits out a retry; the other four are ready (those in flight
/// included: they are ready until answered). One processor exports the
/// backlog series, the other none; `/api/v1/status` and `processor
/// status` (text and JSON) say the same.
async fn the_backlog_is_counted_by_one_processor_and_agrees_everywhere(db: TestDb) {
    let release = Arc::new(Notify::new());
    let h = {
        let release = release.clone();
        Handler::start_async(move |_| {
            let release = release.clone();
            async move {
                release.notified().await;
                done()
            }
        })
        .await
    };
    let items = (0..6).map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("i{i}")));
    db.store
        .enqueue("p", &of("acme"), items.collect())
        .await
        .unwrap();
    db.sql("UPDATE feed_items SET not_before = {now} + 3600000 WHERE id = 'i4'")
        .await;
    db.sql("UPDATE feed_items SET not_before = {now} + 3600000, attempts = 1 WHERE id = 'i5'")
        .await;
    let flags = ["--concurrency", "1", "--ui", "--request-timeout", "300s"];
    let procs = [
        Proc::start(&db, &h.url(), &flags),
        Proc::start(&db, &h.url(), &flags),
    ];
    let ready = "feed_backlog_ready_items{tenant=\"acme\"}";
    let read = || async {
        let mut texts = Vec::new();
        for p in &procs {
            texts.push(p.metrics().await);
        }
        texts
    };
    wait_for(
        "one processor counts the backlog",
        Duration::from_secs(60),
        || async { read().await.iter().any(|t| metric(t, ready) == 4.0) },
    )
    .await;
    let texts = read().await;
    let counting: Vec<&String> = texts.iter().filter(|t| t.contains(ready)).collect();
    assert_eq!(
        counting.len(),
        1,
        "one processor exports the backlog: {texts:?}"
    );
    let text = counting[0];
    assert_eq!(
        metric(text, "feed_backlog_scheduled_items{tenant=\"acme\"}"),
        1.0
    );
    assert_eq!(
        metric(text, "feed_backlog_retrying_items{tenant=\"acme\"}"),
        1.0
    );
    let oldest = metric(text, "feed_backlog_oldest_ready_seconds{tenant=\"acme\"}");
    assert!((0.0..120.0).contains(&oldest), "{text}");

    let base = format!("http://{}", procs[0].listen.as_deref().unwrap());
    let (_, status) = get(&base, "/api/v1/status").await;
    let backlog = &status["backlog"];
    assert_eq!(
        (
            &backlog[0]["tenant"],
            &backlog[0]["ready"],
            &backlog[0]["scheduled"],
            &backlog[0]["retrying"]
        ),
        (&json!("acme"), &json!(4), &json!(1), &json!(1)),
        "{status}"
    );
    assert!(backlog[0]["oldest_ready_ms"].as_i64().is_some(), "{status}");
    let out = processor(&["status", "--json", "--database-url", &db.url], "");
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["backlog"][0]["ready"], json!(4), "{cli}");
    let out = processor(&["status", "--database-url", &db.url], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("backlog     acme: 4 ready (the oldest for ")
            && text.contains("1 scheduled, 1 retrying"),
        "{text}"
    );
    release.notify_waiters();
}

behaviour!(throughput_counts_completions_retries_and_failures);
/// Ten items complete, `flaky` fails once and then completes, `bad` fails
/// both of its two attempts: the fleet's throughput over the last 15
/// minutes holds 11 completed, 2 retried and 1 failed (times 900 s), in
/// `/api/v1/status` and `processor status --json` alike.
async fn throughput_counts_completions_retries_and_failures(db: TestDb) {
    let h = Handler::start(|c| match c.item.as_str() {
        "bad" => no_retry_500(),
        "flaky" if c.attempt == 1 => no_retry_500(),
        _ => done(),
    })
    .await;
    let p = Proc::start(&db, &h.url(), &["--ui", "--max-attempts", "2"]);
    let mut items: Vec<NewItem> = (0..10)
        .map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("ok{i}")))
        .collect();
    items.push(NewItem::new(b"{}".to_vec()).with_id("flaky"));
    items.push(NewItem::new(b"{}".to_vec()).with_id("bad"));
    let spec = PartitionSpec::default();
    db.store.enqueue("p", &spec, items).await.unwrap();
    let base = format!("http://{}", p.listen.as_deref().unwrap());
    wait_console(&base).await;
    let counted = |s: &serde_json::Value| {
        let w = &s["throughput"]["last_15m"];
        let n = |k: &str| (w[k].as_f64().unwrap_or(0.0) * 900.0).round();
        (n("completed"), n("retried"), n("failed"))
    };
    wait_for("the results counted", Duration::from_secs(60), || async {
        counted(&get(&base, "/api/v1/status").await.1) == (11.0, 2.0, 1.0)
    })
    .await;
    let out = processor(&["status", "--json", "--database-url", &db.url], "");
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counted(&cli), (11.0, 2.0, 1.0), "{cli}");
    let out = processor(&["status", "--database-url", &db.url], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("throughput  per second over 1 min: "),
        "{text}"
    );
    // The partition's page: its rate over the last minutes, and nothing left.
    let html = crate::support::page(&format!("{base}/partitions/p")).await;
    assert!(html.contains(r#"<dd id="eta">nothing left</dd>"#), "{html}");
    assert!(
        html.contains(r#"<dd id="rate">"#) && !html.contains(r#"<dd id="rate">0.00/s"#),
        "{html}"
    );
    assert_eq!(cli["partitions"][0]["eta_ms"], json!(null), "{cli}");
    assert!(
        cli["partitions"][0]["rate"].as_f64().unwrap() > 0.0,
        "{cli}"
    );
}

/// A 500: an attempt that failed, to be retried while attempts last.
fn no_retry_500() -> axum::response::Response {
    crate::support::json(500, json!({"error": "no"}))
}
