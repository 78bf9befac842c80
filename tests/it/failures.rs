//! What counts as an attempt, and what as the handler not being there: a
//! handler that answers 500 to everything fails its items; items whose
//! calls time out, reset or are cut off fail after their attempts even
//! when they are all that is left; an item probed again while the breaker
//! is open has its attempt counted; and while dispatch holds off, the log,
//! `status` and `/readyz` say why.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::behaviour;
use crate::cli::processor;
use crate::support::{DownHandler, InProcess, Proc, Spawned, TestDb, metric, numbered, wait_for};

behaviour!(a_handler_answering_500_to_everything_fails_its_items);
/// A 500 with a body is the handler answering: each counts an attempt with
/// the handler's words in `last_error`, the breaker never opens, and every
/// item fails after its attempts.
async fn a_handler_answering_500_to_everything_fails_its_items(db: TestDb) {
    let ids = numbered("i", 30);
    db.partition_of("p", true, false, "continue", &ids).await;
    let InProcess(handler, proc) = InProcess::start_with(
        &db,
        |c| c.retries.max_attempts = 3,
        |_| {
            let body = "KeyError: 'name' in classify()";
            (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    for id in &ids {
        let row = db
            .assert_failed(id, 3, &["HTTP 500", "KeyError: 'name' in classify()"])
            .await;
        // The last attempt says so, and nothing of a retry to come.
        assert_eq!(
            row.last_error.as_deref(),
            Some(
                "handler answered HTTP 500: KeyError: 'name' in classify() (attempt 3 of 3; no attempts left)"
            )
        );
    }
    assert_eq!(handler.calls().len(), 90, "three calls per item");
    let text = proc.metrics().await;
    assert_eq!(metric(&text, "feed_breaker_trips_total"), 0.0);
}

/// Serves one answer per item id prefix over raw TCP: `good` finishes,
/// `reset` resets the connection, `cut` sends half an answer and closes,
/// `slow` answers after 3 s (beyond a 1 s `--request-timeout`).
async fn poison_handler() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/feed", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).to_lowercase();
                let done = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                            Content-Length: 14\r\nConnection: close\r\n\r\n{\"done\": true}";
                if head.contains("feed-item-id: reset") {
                    let _ = sock.set_zero_linger(); // closing now sends a TCP reset
                    return;
                }
                if head.contains("feed-item-id: cut") {
                    let half = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"done\": tr";
                    let _ = sock.write_all(half.as_bytes()).await;
                    let _ = sock.shutdown().await;
                    return;
                }
                if head.contains("feed-item-id: slow") {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                let _ = sock.write_all(done.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    url
}

behaviour!(poison_items_alone_at_the_end_fail);
/// Twenty good items and six poison ones (two reset the connection, two
/// are cut off mid-answer, two outlast the request timeout): once the
/// poison items are all that is left, their failures are theirs, not an
/// outage; each uses up its attempts and fails, and the partition ends.
async fn poison_items_alone_at_the_end_fail(db: TestDb) {
    let good = numbered("good", 20);
    let poison = ["reset-1", "reset-2", "cut-1", "cut-2", "slow-1", "slow-2"];
    db.partition_of("p", true, false, "continue", &good).await;
    db.items("p", 0, &poison).await;
    let url = poison_handler().await;
    let args = ["--max-attempts", "3", "--request-timeout", "1s"];
    let proc = Proc::start(&db, &url, &args);
    db.wait_partition("p", "complete").await;
    for id in &good {
        assert_eq!(db.item_row(id).await.status, "complete", "{id}");
    }
    for id in &poison[..4] {
        db.assert_failed(id, 3, &["handler request failed"]).await;
    }
    for id in &poison[4..] {
        db.assert_failed(id, 3, &["did not answer within --request-timeout"])
            .await;
    }
    let text = proc.metrics().await;
    assert_eq!(metric(&text, "feed_breaker_trips_total"), 0.0);
}

behaviour!(an_item_probed_again_while_the_breaker_is_open_counts);
/// Two items the handler answers 503 forever: the breaker opens (two items
/// fail, half its window of four), so their failures count no attempt at
/// first; but a probe of an item already probed in this outage counts, so
/// both use up their attempts and fail instead of being probed for ever.
async fn an_item_probed_again_while_the_breaker_is_open_counts(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["a", "b"])
        .await;
    let args = ["--max-attempts", "3", "--breaker-calls", "4"];
    let Spawned(handler, proc) = Spawned::start(&db, &args, |_| {
        (StatusCode::SERVICE_UNAVAILABLE, "deploying").into_response()
    })
    .await;
    db.wait_partition("p", "complete").await;
    for id in ["a", "b"] {
        db.assert_failed(id, 3, &["HTTP 503", "deploying"]).await;
    }
    let text = proc.metrics().await;
    assert_eq!(metric(&text, "feed_breaker_trips_total"), 1.0);
    // Each item: a call or two before the breaker opened (or in flight
    // as it did), one probe that counted nothing, then counted probes:
    // a bounded number of calls, not probes for ever.
    let calls = handler.calls().len();
    assert!((6..=12).contains(&calls), "{calls} calls");
}

behaviour!(a_handler_nobody_listens_at_is_reported_while_it_lasts);
/// Nobody listens at the handler's URL: no attempt is counted, the log
/// names the URL and the error when dispatch starts holding off and again
/// while it lasts, and `status` (text and JSON) and `/readyz` say so; once
/// the handler is up, work resumes and the processor's hold is cleared.
async fn a_handler_nobody_listens_at_is_reported_while_it_lasts(db: TestDb) {
    db.partition_of("p", true, false, "block", &["a"]).await;
    let (down, proc) = DownHandler::start(&db, &[]);
    let warning = "dispatch holds off: the handler is not there";
    wait_for("the warning, twice", Duration::from_secs(60), || async {
        proc.log().matches(warning).count() >= 2
    })
    .await;
    let log = proc.log();
    let line = log.lines().find(|l| l.contains(warning)).unwrap();
    assert!(line.contains("127.0.0.1:"), "names the URL: {line}");
    assert!(
        line.to_lowercase().contains("refused"),
        "names the error: {line}"
    );
    let status = processor(&["status", "--database-url", &db.url], "");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(out.contains("holds dispatch off"), "{out}");
    assert!(out.to_lowercase().contains("refused"), "{out}");
    // A wait that times out says why the partition is still open.
    let wait = [
        "wait",
        "--database-url",
        &db.url,
        "--partition",
        "p",
        "--timeout",
        "200ms",
    ];
    let waited = processor(&wait, "");
    let why = String::from_utf8_lossy(&waited.stderr);
    assert_eq!(waited.status.code(), Some(3), "{why}");
    assert!(
        why.contains("holds dispatch off (no attempts counted)"),
        "{why}"
    );
    assert!(why.to_lowercase().contains("refused"), "{why}");
    let json = processor(&["status", "--database-url", &db.url, "--json"], "");
    let s: Value = serde_json::from_slice(&json.stdout).unwrap();
    let held = &s["processors"][0];
    assert!(
        held["held_reason"].as_str().unwrap().contains("refused"),
        "{held}"
    );
    assert!(held["held_since"].as_i64().unwrap() > 0, "{held}");
    let ready = format!("http://{}/readyz", proc.listen.as_deref().unwrap());
    let body = reqwest::get(&ready).await.unwrap().text().await.unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(body["held"].as_str().unwrap().contains("refused"), "{body}");
    assert_eq!(db.item_row("a").await.attempts, 0, "no attempt counted");
    let since = metric(&proc.metrics().await, "feed_held_off_since_seconds");
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        since > now - 120.0 && since <= now,
        "held off since {since}"
    );
    let _handler = down.up(|_| crate::support::done()).await;
    db.wait_partition("p", "complete").await;
    wait_for("the hold to clear", Duration::from_secs(10), || async {
        let s = processor(&["status", "--database-url", &db.url, "--json"], "");
        let s: Value = serde_json::from_slice(&s.stdout).unwrap();
        s["processors"][0]["held_reason"].is_null()
    })
    .await;
    let since = metric(&proc.metrics().await, "feed_held_off_since_seconds");
    assert_eq!(since, 0.0);
}

behaviour!(status_shows_items_waiting_to_retry);
/// An item whose attempt failed and that waits out its backoff is listed
/// by `status` (text and JSON) with its last error, before it fails.
async fn status_shows_items_waiting_to_retry(db: TestDb) {
    db.partition_of("p", true, false, "block", &["x"]).await;
    let args = ["--backoff-base", "1h", "--backoff-max", "1h"];
    let _scene = Spawned::start(&db, &args, |_| {
        json_error(500, "the OCR service said: page 3 is blank")
    })
    .await;
    wait_for("a failed attempt", Duration::from_secs(30), || async {
        db.item_row("x").await.attempts == 1
    })
    .await;
    let status = processor(&["status", "--database-url", &db.url], "");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(out.contains("waiting to retry"), "{out}");
    assert!(out.contains("page 3 is blank"), "{out}");
    let json = processor(&["status", "--database-url", &db.url, "--json"], "");
    let s: Value = serde_json::from_slice(&json.stdout).unwrap();
    let item = &s["retrying_items"][0];
    assert_eq!(item["id"], "x");
    assert_eq!(item["attempts"], 1);
    assert!(
        item["last_error"]
            .as_str()
            .unwrap()
            .contains("page 3 is blank")
    );
}

fn json_error(status: u16, message: &str) -> axum::response::Response {
    crate::support::json(status, json!({"error": {"message": message}}))
}
