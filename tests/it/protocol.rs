//! The handler protocol (the book: Writing a handler): retries, failures, Retry-After,
//! a handler that is down, and the request headers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use crate::behaviour;
use crate::support::{
    DownHandler, InProcess, Spawned, TestDb, done, json as reply, no_retry, numbered, retry_after,
    wait_for,
};

behaviour!(retry_then_success);
/// Two 500s then success: three attempts, 1-based `Feed-Attempt`, one idempotency key.
async fn retry_then_success(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"v": 1})).await;
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        if c.attempt < 3 {
            reply(500, json!({"oops": c.attempt}))
        } else {
            reply(200, json!({"done": true, "data": {"v": 2}}))
        }
    })
    .await;
    db.wait_partition("p", "complete").await;
    let calls = h.calls_for("i");
    assert_eq!(
        calls.iter().map(|c| c.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(
        calls
            .iter()
            .all(|c| c.idempotency_key == calls[0].idempotency_key)
    );
    assert!(
        calls.iter().all(|c| c.data == json!({"v": 1})),
        "a failed attempt changed the data"
    );
    let row = db.item_row("i").await;
    assert_eq!(
        (row.status.as_str(), row.attempts, row.data),
        ("complete", 3, json!({"v": 2}))
    );
    assert_eq!(row.last_error, None);
}

behaviour!(exhausted_attempts_fail_partition);
/// Every attempt fails: the item is `failed` with `attempts` and
/// `last_error`; the partition is `failed`.
async fn exhausted_attempts_fail_partition(db: TestDb) {
    db.partition_of("p", true, false, "block", &["bad", "good"])
        .await;
    db.item("later", "p", 1, json!({})).await;
    let InProcess(h, _p) = InProcess::start_with(
        &db,
        |c| c.retries.max_attempts = 3,
        |c| {
            if c.item == "bad" {
                reply(503, json!({"busy": true}))
            } else {
                done()
            }
        },
    )
    .await;
    db.wait_partition("p", "failed").await;
    db.assert_failed("bad", 3, &["HTTP 503", "attempt 3 of 3"])
        .await;
    assert_eq!(h.calls_for("bad").len(), 3);
    assert_eq!(db.item_row("good").await.status, "complete");
    assert!(
        h.calls_for("later").is_empty(),
        "fan-in passed a failed item"
    );
    assert_eq!(db.item_row("later").await.status, "available");
}

behaviour!(on_failure_continue_closes);
/// `on_failure = continue`: failed items count as finished.
async fn on_failure_continue_closes(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["bad"])
        .await;
    db.item("later", "p", 1, json!({})).await;
    let InProcess(_h, _p) = InProcess::start_with(
        &db,
        |c| c.retries.max_attempts = 2,
        |c| {
            if c.item == "bad" {
                reply(500, json!({}))
            } else {
                done()
            }
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    assert_eq!(db.item_row("bad").await.status, "failed");
    assert_eq!(db.item_row("later").await.status, "complete");
}

behaviour!(no_retry_fails_at_once);
/// `{"error": {"no_retry": true}}` fails the item on the first attempt.
async fn no_retry_fails_at_once(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"keep": "me"})).await;
    let InProcess(h, _p) = InProcess::start(&db, |_| no_retry(200, "corrupt PDF")).await;
    db.wait_partition("p", "failed").await;
    let row = db.assert_failed("i", 1, &["corrupt PDF"]).await;
    assert_eq!(row.data, json!({"keep": "me"}));
    assert_eq!(h.calls().len(), 1);
}

behaviour!(a_2xx_error_answer_is_a_retried_attempt);
/// A 2xx whose answer carries `"error"` is a failed attempt, not a step:
/// the `done` beside it is ignored, the item's data is kept, and it is
/// retried.
async fn a_2xx_error_answer_is_a_retried_attempt(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"keep": "me"})).await;
    let flags = ["--backoff-base", "10ms"];
    let Spawned(h, _p) = Spawned::start(&db, &flags, |c| {
        if c.attempt == 1 {
            reply(
                200,
                json!({"done": true, "data": {"lost": 1}, "error": {"message": "not yet"}}),
            )
        } else {
            done()
        }
    })
    .await;
    db.wait_partition("p", "complete").await;
    let calls = h.calls_for("i");
    assert_eq!(calls.len(), 2, "retried once");
    assert_eq!(calls[1].data, json!({"keep": "me"}), "data kept");
    assert_eq!(db.item_row("i").await.attempts, 2);
}

behaviour!(non_retryable_4xx);
/// 404 and 422 are not retried, also when the body is an `{"error": …}`
/// answer that does not say `no_retry`: the status decides (a 404 that no
/// answer came before may be sent once more, uncounted: see `wrong_url`).
async fn non_retryable_4xx(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["nf", "ue", "eb"])
        .await;
    let InProcess(h, _p) = InProcess::start(&db, |c| match c.item.as_str() {
        "nf" => (StatusCode::NOT_FOUND, "no such thing").into_response(),
        "eb" => reply(422, json!({"error": {"message": "unprocessable"}})),
        _ => (StatusCode::UNPROCESSABLE_ENTITY, "no such thing").into_response(),
    })
    .await;
    db.wait_partition("p", "complete").await;
    for (id, code) in [("nf", "404"), ("ue", "422")] {
        db.assert_failed(id, 1, &[code, "not retried"]).await;
    }
    assert_eq!(h.calls_for("ue").len(), 1);
    // A 404 with no answer before it may be a wrong URL: it is tried once
    // more without an attempt counted, then it is the item's own.
    let calls = h.calls_for("nf").len();
    assert!((1..=2).contains(&calls), "{calls} calls for a 404");
    // What was answered, then what came of it, each said once.
    let nf = db.item_row("nf").await.last_error;
    assert_eq!(
        nf.as_deref(),
        Some("handler answered HTTP 404: no such thing (not retried)")
    );
    db.assert_failed("eb", 1, &["unprocessable"]).await;
    assert_eq!(h.calls_for("eb").len(), 1, "a 422 error answer was retried");
}

behaviour!(retry_after_is_honoured);
/// 429 with `Retry-After: 2`: the retry waits at least that long, even
/// with a tiny backoff, and the delay is stored in `not_before`.
async fn retry_after_is_honoured(db: TestDb) {
    db.partition_of("p", true, false, "block", &["i"]).await;
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        if c.attempt == 1 {
            retry_after(429, "2", "slow down")
        } else {
            done()
        }
    })
    .await;
    wait_for(
        "first attempt recorded",
        Duration::from_secs(30),
        || async { db.item_row("i").await.attempts == 1 },
    )
    .await;
    let row = db.item_row("i").await;
    assert!(row.not_before.is_some(), "the retry time is stored");
    assert!(row.last_error.unwrap().contains("429"));
    db.wait_partition("p", "complete").await;
    let calls = h.calls_for("i");
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_millis(1900),
        "retried after {gap:?}, before Retry-After"
    );
}

behaviour!(gate_below_partition_gate_fails);
/// A handler answering a gate below the partition's gate fails the item
/// with a message that says so.
async fn gate_below_partition_gate_fails(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 1, json!({})).await;
    db.sql("UPDATE feed_partitions SET gate = 1 WHERE id = 'p'")
        .await;
    let InProcess(_h, _p) = InProcess::start(&db, |_| reply(200, json!({"gate": 0}))).await;
    db.wait_partition("p", "failed").await;
    let row = db.item_row("i").await;
    assert_eq!((row.status.as_str(), row.gate), ("failed", 1));
    let err = row.last_error.unwrap();
    assert!(
        err.contains("gate 0") && err.contains("below the partition's gate 1"),
        "{err}"
    );
}

behaviour!(handler_down_then_up);
/// The handler is down (connection refused) for a while: no attempts are
/// burned; once it is up everything finishes on the first attempt.
async fn handler_down_then_up(db: TestDb) {
    let items = numbered("i", 5);
    db.partition_of("p", true, false, "block", &items).await;
    let (handler, p) = DownHandler::start(&db, &["--max-attempts", "2"]);
    wait_for(
        "processor reports unreachable",
        Duration::from_secs(30),
        || async {
            crate::support::metric(&p.metrics().await, "feed_handler_unreachable_total") >= 3.0
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ready = reqwest::get(format!("http://{}/readyz", p.listen.as_ref().unwrap()))
        .await
        .unwrap();
    assert_eq!(
        ready.status().as_u16(),
        503,
        "readyz must say not ready while the handler is down"
    );
    for row in db.item_rows(&items).await {
        assert_eq!(
            (row.status.as_str(), row.attempts),
            ("available", 0),
            "an attempt was burned"
        );
    }
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    let h = handler
        .up(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
            done()
        })
        .await;
    db.wait_partition("p", "complete").await;
    for row in db.item_rows(&items).await {
        assert_eq!((row.status.as_str(), row.attempts), ("complete", 1));
    }
    assert_eq!(h.calls().len(), 5);
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}
