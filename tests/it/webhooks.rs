//! Completion events delivered as signed webhooks (`run --events-url`):
//! once each, in order, signed as events; kept through a killed sender,
//! a receiver that is down, and one that refuses them for good.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use feed::handler::events_secret;
use serde_json::{Value, json};

use crate::behaviour;
use crate::cli::processor;
use crate::support::{
    Handler, InProcess, Proc, Reserved, Spawned, TestDb, done, metric, no_retry, numbered,
    retry_after, signed, signed_event, wait_for,
};

const SECRET: &str = "events-secret-0123456789";

/// Each event row as (partition, kind, delivery status, attempts).
async fn rows(db: &TestDb) -> Vec<(String, String, String, i32)> {
    db.rows(
        "SELECT partition_id, kind, status, attempts FROM feed_events ORDER BY id",
        &["partition_id", "kind", "status", "attempts"],
    )
    .await
}

/// Waits until every event is delivered.
async fn all_delivered(db: &TestDb, n: usize) {
    wait_for("events delivered", Duration::from_secs(60), || async {
        let r = rows(db).await;
        r.len() == n && r.iter().all(|(_, _, s, _)| s == "delivered")
    })
    .await;
}

behaviour!(events_are_delivered_signed_once);
/// A close, a failure and a cancellation each reach the receiver once, as
/// signed JSON with the event id as the idempotency key.
async fn events_are_delivered_signed_once(db: TestDb) {
    let receiver = Handler::start(|_| done()).await;
    db.partition_of("ok", true, false, "block", &["ok/1", "ok/2"])
        .await;
    db.partition_of("bad", true, false, "block", &["bad/1"])
        .await;
    db.partition_of("gone", true, false, "block", &["gone/1"])
        .await;
    db.sql("UPDATE feed_partitions SET paused = TRUE WHERE id = 'gone'")
        .await;
    let url = receiver.url();
    let extra = ["--events-url", &url, "--signing-secret", SECRET];
    let _scene = Spawned::start(&db, &extra, |c| {
        if c.item == "bad/1" {
            no_retry(422, "no")
        } else {
            done()
        }
    })
    .await;
    db.store.cancel("gone").await.unwrap();
    all_delivered(&db, 3).await;
    // Nothing is sent twice: a few more rounds pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    let ids: Vec<i64> = db
        .rows::<(i64,)>("SELECT id FROM feed_events ORDER BY id", &["id"])
        .await
        .into_iter()
        .map(|(i,)| i)
        .collect();
    let mut kinds = vec![];
    for c in &calls {
        let body: Value = serde_json::from_slice(&c.body).unwrap();
        let id = body["id"].as_i64().unwrap();
        assert!(ids.contains(&id));
        assert_eq!(c.header("idempotency-key"), Some(id.to_string().as_str()));
        assert_eq!(c.header("feed-event"), body["event"].as_str());
        assert_eq!(c.header("feed-attempt"), Some("1"));
        assert_eq!(body["partition_id"].as_str(), Some(c.partition.as_str()));
        // Signed with the events secret that goes with the signing secret.
        let events = feed::config::signing::signing_key(&events_secret(SECRET).unwrap()).unwrap();
        assert!(signed_event(c, &events, &c.body), "signed as an event");
        assert!(!signed(c, &events, &c.body), "never as an item");
        assert!(
            !signed_event(c, SECRET.as_bytes(), &c.body),
            "not with the item requests' key"
        );
        let at = body["occurred_at"].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
        kinds.push((
            c.partition.clone(),
            body["event"].clone(),
            body["counts"].clone(),
        ));
    }
    kinds.sort_by(|a, b| a.0.cmp(&b.0));
    let counts = |a: i64, c: i64, f: i64, x: i64| json!({"available": a, "complete": c, "failed": f, "cancelled": x});
    assert_eq!(
        kinds,
        [
            ("bad".into(), json!("partition.failed"), counts(0, 0, 1, 0)),
            (
                "gone".into(),
                json!("partition.cancelled"),
                counts(0, 0, 0, 1)
            ),
            ("ok".into(), json!("partition.complete"), counts(0, 2, 0, 0)),
        ]
    );
}

behaviour!(a_killed_sender_hands_its_events_over);
/// The sender is killed while the receiver holds its request: the next
/// processor takes the lease once it expires and sends the same event
/// (same id) again, which is then marked delivered.
async fn a_killed_sender_hands_its_events_over(db: TestDb) {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let receiver = Handler::start_async(move |_| {
        let first = s.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                std::future::pending::<()>().await;
            }
            done()
        }
    })
    .await;
    let items = Handler::start(|_| done()).await;
    db.partition_of("p", true, false, "block", &["p/1"]).await;
    let url = receiver.url();
    let extra = ["--events-url", url.as_str()];
    let first = Proc::start(&db, &items.url(), &extra);
    wait_for("the first send", Duration::from_secs(30), || async {
        seen.load(Ordering::SeqCst) == 1
    })
    .await;
    drop(first); // SIGKILL mid-request
    assert_eq!(rows(&db).await[0].2, "pending");
    let _second = Proc::start(&db, &items.url(), &extra);
    all_delivered(&db, 1).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].idempotency_key, calls[1].idempotency_key,
        "the same event"
    );
    assert_eq!(
        rows(&db).await[0].3,
        1,
        "the killed attempt was never stored"
    );
}

behaviour!(a_receiver_that_is_down_gets_the_event_later);
/// While nothing listens at the events URL, each failed attempt is stored
/// with its error and a backoff; once the receiver is up the event is
/// delivered.
async fn a_receiver_that_is_down_gets_the_event_later(db: TestDb) {
    let port = Reserved::new();
    let url = format!("http://127.0.0.1:{}/events", port.port());
    let items = Handler::start(|_| done()).await;
    db.partition_of("p", true, false, "block", &["p/1"]).await;
    let _p = Proc::start(&db, &items.url(), &["--events-url", &url]);
    wait_for(
        "failed attempts stored",
        Duration::from_secs(30),
        || async {
            let rows: Vec<(i32, Option<String>, Option<i64>)> = db
                .rows(
                    "SELECT attempts, last_error, not_before FROM feed_events",
                    &["attempts", "last_error", "not_before"],
                )
                .await;
            rows.first().is_some_and(|(n, e, nb)| {
                *n >= 2
                    && e.as_deref()
                        .is_some_and(|e| e.contains("events request failed"))
                    && nb.is_some()
            })
        },
    )
    .await;
    assert_eq!(rows(&db).await[0].2, "pending");
    let receiver = Handler::serve(port.listen(), Arc::new(Box::new(|_| done()))).await;
    all_delivered(&db, 1).await;
    assert_eq!(receiver.calls().len(), 1);
    let attempts = rows(&db).await[0].3;
    assert!(attempts >= 3, "{attempts}");
    assert_eq!(
        receiver.calls()[0].header("feed-attempt"),
        Some(attempts.to_string().as_str())
    );
}

behaviour!(a_refused_event_is_kept_and_retried_on_request);
/// A 4xx answer fails the event at once; it is counted in `status` and the
/// metrics, and `processor events retry` sends it again.
async fn a_refused_event_is_kept_and_retried_on_request(db: TestDb) {
    let accept = Arc::new(AtomicBool::new(false));
    let a = accept.clone();
    let receiver = Handler::start(move |_| {
        if a.load(Ordering::SeqCst) {
            done()
        } else {
            no_retry(410, "gone")
        }
    })
    .await;
    db.partition_of("p", true, false, "block", &["p/1"]).await;
    let url = receiver.url();
    let scene = Spawned::start(&db, &["--events-url", &url], |_| done()).await;
    wait_for("the event failed", Duration::from_secs(30), || async {
        rows(&db).await.first().is_some_and(|r| r.2 == "failed")
    })
    .await;
    let (err,): (Option<String>,) = db
        .rows("SELECT last_error FROM feed_events", &["last_error"])
        .await
        .remove(0);
    assert!(err.unwrap().contains("410"), "the reason is kept");
    assert_eq!(rows(&db).await[0].3, 1, "no retry after a refusal");
    assert_eq!(
        metric(&scene.1.metrics().await, "feed_events_failed_total"),
        1.0
    );
    let o = processor(&["status", "--database-url", &db.url], "");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("pending: 0  failed: 1"), "{text}");
    let o = processor(
        &[
            "events",
            "list",
            "--database-url",
            &db.url,
            "--status",
            "failed",
            "--json",
        ],
        "",
    );
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed["kind"], json!("partition.complete"));
    accept.store(true, Ordering::SeqCst);
    let o = processor(&["events", "retry", "--database-url", &db.url, "--all"], "");
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 failed event back to pending"));
    all_delivered(&db, 1).await;
    assert_eq!(receiver.calls().len(), 2);
}

behaviour!(a_receiver_answering_429_retry_after_0_is_not_hammered);
/// A receiver that answers every event `429` with `Retry-After: 0`: each
/// event is tried again no sooner than `--backoff-base` (1 s here), so 100
/// events make at most about 100 calls a second, and none fails before its
/// 25 attempts could have been spent at that floor.
async fn a_receiver_answering_429_retry_after_0_is_not_hammered(db: TestDb) {
    let receiver = Handler::start(|_| retry_after(429, "0", "slow down")).await;
    let ids = numbered("e", 100);
    for id in &ids {
        db.partition_of(id, true, false, "block", &[format!("{id}/1")])
            .await;
    }
    let url = receiver.url();
    let extra = [
        "--events-url",
        url.as_str(),
        "--backoff-base",
        "1s",
        "--backoff-max",
        "5s",
    ];
    let _scene = Spawned::start(&db, &extra, |_| done()).await;
    wait_for("the first event calls", Duration::from_secs(60), || async {
        !receiver.calls().is_empty()
    })
    .await;
    let first = receiver.calls()[0].at;
    let window = Duration::from_secs(4);
    tokio::time::sleep_until((first + window).into()).await;
    let calls: Vec<_> = receiver
        .calls()
        .into_iter()
        .filter(|c| c.at < first + window)
        .collect();
    // Each event at most once a second: 100 × (4 s / 1 s + 1) at most.
    assert!(calls.len() <= 500, "{} calls in {window:?}", calls.len());
    let mut by_event: std::collections::HashMap<String, Vec<Instant>> = Default::default();
    for c in &calls {
        by_event
            .entry(c.idempotency_key.clone())
            .or_default()
            .push(c.at);
    }
    for (event, at) in &by_event {
        for pair in at.windows(2) {
            let gap = pair[1] - pair[0];
            // The floor is measured on the database's clock; 0.9 s allows
            // for the two clocks drifting apart.
            assert!(gap >= Duration::from_millis(900), "event {event}: {gap:?}");
        }
    }
    let failed = db
        .count("SELECT COUNT(*) AS n FROM feed_events WHERE status = 'failed'")
        .await;
    assert_eq!(failed, 0, "no event spent 25 attempts within {window:?}");
}

behaviour!(pending_events_without_a_sender_say_so);
/// Without `--events-url` events are kept but not sent: the processor's
/// start says so, and `events list` and `status` say that no receiver is
/// configured while events are pending. Once a processor sends them (to a
/// receiver that is down, so they stay pending) the note is gone.
async fn pending_events_without_a_sender_say_so(db: TestDb) {
    db.partition_of("p", true, false, "block", &["p/1"]).await;
    let InProcess(_h, proc) = InProcess::start(&db, |_| done()).await;
    wait_for("the close's event", Duration::from_secs(30), || async {
        rows(&db).await.len() == 1
    })
    .await;
    let started = proc.log();
    let line = started.lines().find(|l| l.contains("processor started"));
    assert!(
        line.is_some_and(|l| l.contains("not sent (no --events-url)")),
        "{started}"
    );
    let note = "no events receiver is configured here (--events-url)";
    let o = processor(&["events", "list", "--database-url", &db.url], "");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains(note), "{err}");
    let o = processor(&["status", "--database-url", &db.url], "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("pending: 1") && out.contains(note), "{out}");

    let receiver = Handler::start(|_| retry_after(503, "1", "deploying")).await;
    let url = receiver.url();
    let _sender = Spawned::start(&db, &["--events-url", &url], |_| done()).await;
    wait_for("a first send", Duration::from_secs(30), || async {
        !receiver.calls().is_empty()
    })
    .await;
    assert_eq!(rows(&db).await[0].2, "pending");
    let o = processor(&["events", "list", "--database-url", &db.url], "");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains(note), "{err}");
}
