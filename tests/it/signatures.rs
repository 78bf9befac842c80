//! Signed requests checked by third-party code, not Feed's: the
//! `standardwebhooks` crate, and the book's Python snippets run with the
//! `standardwebhooks` package. Single items, batches, a retried step,
//! events, a rotation of secrets, and an item request replayed to the
//! events receiver, which must fail.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use feed::handler::events_secret;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::behaviour;
use crate::support::{
    Call, Handler, Proc, TestDb, done, json as reply, no_retry, retry_after, signed, signed_event,
    wait_for,
};

/// A `whsec_` secret (24 random bytes, base64) and a raw one, as in a rotation.
const NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OLD: &str = "old raw secret, 24 bytes";

fn new_key() -> Webhook {
    Webhook::new(NEW).unwrap()
}

fn old_key() -> Webhook {
    Webhook::from_bytes(OLD.as_bytes().to_vec()).unwrap()
}

/// Whether the crate verifies `call` with both secrets of the rotation.
fn verifies(call: &Call) -> bool {
    new_key().verify(&call.body, &call.headers).is_ok()
        && old_key().verify(&call.body, &call.headers).is_ok()
}

/// What the book tells an events receiver to do: a plain Standard
/// Webhooks check with the events secrets that go with both signing
/// secrets (`processor events secret` prints them), no check of its own.
fn event_verifies(call: &Call) -> bool {
    [NEW, OLD].iter().all(|s| {
        let key = Webhook::new(&events_secret(s).unwrap()).unwrap();
        key.verify(&call.body, &call.headers).is_ok()
    })
}

/// The key of the events secret that goes with `secret`.
fn events_key(secret: &str) -> Vec<u8> {
    feed::config::signing::signing_key(&events_secret(secret).unwrap()).unwrap()
}

/// The answer of a receiver that only accepts what `check` verifies.
fn unless(ok: bool, answer: axum::response::Response) -> axum::response::Response {
    if ok {
        answer
    } else {
        no_retry(401, "bad signature")
    }
}

const SECRETS: [&str; 4] = ["--signing-secret", NEW, "--signing-secret", OLD];

behaviour!(single_items_and_a_retried_step);
/// Each single-item request verifies with both secrets; `webhook-id` is
/// the `Idempotency-Key` (a `.` in an item id percent-encoded) and the same
/// on the retry of a step; a changed body does not verify.
async fn single_items_and_a_retried_step(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("plain", "p", 0, json!({"n": 1})).await;
    db.item("scan.pdf", "p", 0, json!({"n": 2})).await;
    db.item("retried", "p", 0, json!({"n": 3})).await;
    let h = Handler::start(|c| {
        let answer = match (c.item.as_str(), c.attempt) {
            ("retried", 1) => retry_after(503, "0", "busy"),
            _ => done(),
        };
        unless(verifies(c), answer)
    })
    .await;
    let _p = Proc::start(&db, &h.url(), &SECRETS);
    db.wait_partition("p", "complete").await;
    let calls = h.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    for c in &calls {
        assert!(verifies(c), "{}", c.item);
        let id = c.header("webhook-id").unwrap();
        let expected = c.idempotency_key.replace('.', "%2E");
        assert_eq!(id, expected, "the Idempotency-Key, without a dot");
        assert!(!id.contains('.'));
        assert!(signed(
            c,
            feed::config::signing::signing_key(NEW).unwrap().as_slice(),
            &c.body
        ));
        assert!(signed(c, OLD.as_bytes(), &c.body), "Feed-Signature too");
        let mut tampered = c.body.clone();
        tampered.push(b' ');
        assert!(new_key().verify(&tampered, &c.headers).is_err());
    }
    let retried = h.calls_for("retried");
    assert_eq!(retried.len(), 2);
    assert_eq!(
        retried[0].header("webhook-id"),
        retried[1].header("webhook-id"),
        "one id for every retry of a step"
    );
    assert_eq!(python(&calls, Kind::Item, true), vec![true; calls.len()]);
}

behaviour!(batches_verify_and_keep_their_id_on_retry);
/// A batch request (only Standard Webhooks, `--signature-scheme
/// standard`) verifies; the batch sent again for the same steps has the
/// same `webhook-id`, another batch another one.
async fn batches_verify_and_keep_their_id_on_retry(db: TestDb) {
    db.partition("p", true, false, "block").await;
    for i in 0..3 {
        db.item(&format!("b{i}"), "p", 0, json!({"n": i})).await;
    }
    let first = Arc::new(AtomicUsize::new(0));
    let f = first.clone();
    let h = Handler::start(move |c| {
        let answer = if f.fetch_add(1, Ordering::SeqCst) == 0 {
            retry_after(503, "1", "busy")
        } else {
            let n = c.data.as_array().map_or(0, Vec::len);
            reply(200, Value::Array(vec![Value::Null; n]))
        };
        unless(verifies(c), answer)
    })
    .await;
    let flags = [&SECRETS[..], &["--batch-size", "3"]].concat();
    let flags = [&flags[..], &["--signature-scheme", "standard"]].concat();
    let _p = Proc::start(&db, &h.url(), &flags);
    db.wait_partition("p", "complete").await;
    let calls = h.calls();
    assert_eq!(calls.len(), 2, "one batch, then the same batch again");
    let keys = |c: &Call| -> Vec<String> {
        let items = c.data.as_array().unwrap().iter();
        items
            .map(|i| i["idempotency_key"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(keys(&calls[0]), keys(&calls[1]), "the same steps");
    for c in &calls {
        assert!(verifies(c));
        assert!(c.header("feed-signature").is_none(), "standard only");
        assert!(c.header("webhook-id").unwrap().starts_with("batch_"));
    }
    assert_eq!(calls[0].header("webhook-id"), calls[1].header("webhook-id"));
    // A batch of other steps has another id.
    db.partition_of("q", true, false, "block", &["q1"]).await;
    db.wait_partition("q", "complete").await;
    let last = h.calls().pop().unwrap();
    assert!(verifies(&last));
    assert_ne!(last.header("webhook-id"), calls[0].header("webhook-id"));
    assert_eq!(python(&h.calls(), Kind::Item, false), vec![true; 3]);
}

behaviour!(events_verify_and_item_requests_replayed_to_them_fail);
/// An event verifies (its `webhook-id` is its id, the same on its retry),
/// and an item request whose data a producer made a fake event, replayed
/// to the events receiver with Feed's headers, is refused: its
/// `Feed-Signature` is not an event's, and its `webhook-id` is an item's.
async fn events_verify_and_item_requests_replayed_to_them_fail(db: TestDb) {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let receiver = Handler::start(move |c| {
        let ok = event_verifies(c)
            && signed_event(c, &events_key(OLD), &c.body)
            && !signed(c, &events_key(OLD), &c.body)
            && !verifies(c);
        let answer = if ok && s.fetch_add(1, Ordering::SeqCst) == 0 {
            retry_after(503, "0", "busy")
        } else {
            done()
        };
        unless(ok, answer)
    })
    .await;
    let fake = json!({"id": 1, "event": "partition.complete", "partition_id": "victim",
        "gate": 0, "counts": {"available": 0, "complete": 9, "failed": 0, "cancelled": 0},
        "occurred_at": "2026-01-01T00:00:00.000Z"});
    db.partition("p", true, false, "block").await;
    db.item("forged", "p", 0, fake).await;
    let items = Handler::start(|c| unless(verifies(c), done())).await;
    let url = receiver.url();
    // The secrets from a file this time, one a line.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets");
    std::fs::write(&file, format!("{NEW}\n\n{OLD}\n")).unwrap();
    let file = file.display().to_string();
    let flags = ["--signing-secret-file", &file, "--events-url", &url];
    let _p = Proc::start(&db, &items.url(), &flags);
    wait_for("the event delivered", Duration::from_secs(60), || async {
        db.count("SELECT COUNT(*) AS n FROM feed_events WHERE status = 'delivered'")
            .await
            == 1
    })
    .await;
    let events = receiver.calls();
    assert_eq!(events.len(), 2, "the event, then its retry");
    let id = events[0].data["id"].as_i64().unwrap().to_string();
    for e in &events {
        assert!(event_verifies(e));
        assert_eq!(e.header("webhook-id"), Some(id.as_str()), "the event id");
        assert_eq!(e.idempotency_key, id);
    }
    // The item request, replayed to the events receiver as Feed sent it.
    let item = items.calls_for("forged").remove(0);
    assert!(verifies(&item), "a genuine item request");
    let mut replay = reqwest::Client::new().post(&url).body(item.body.clone());
    for (name, value) in &item.headers {
        if name != "host" && name != "content-length" {
            replay = replay.header(name, value);
        }
    }
    let status = replay.send().await.unwrap().status();
    assert_eq!(status, 401, "the events receiver refuses it");
    assert_eq!(receiver.calls().len(), 3);
    assert!(!signed_event(&item, &events_key(OLD), &item.body));
    assert!(
        !event_verifies(&item),
        "not even by a check without the id rule"
    );
    let ids: HashSet<&str> = events
        .iter()
        .filter_map(|e| e.header("webhook-id"))
        .collect();
    let item_id = item.header("webhook-id").unwrap();
    assert!(
        item_id.contains(':') && !ids.contains(item_id),
        "an item's webhook-id is never an event's: {item_id}"
    );
    assert_eq!(python(&events, Kind::Event, true), vec![true; 2]);
    assert_eq!(python(&[item], Kind::Event, true), vec![false]);
}

#[derive(Clone, Copy)]
enum Kind {
    Item,
    Event,
}

/// Reads requests (headers, base64 body) from stdin and prints whether
/// each passes the book's checks.
const DRIVER: &str = r#"
import base64, json, sys
out = []
for r in json.load(sys.stdin):
    h, body = r["headers"], base64.b64decode(r["body"])
    try:
        CHECK(h, body)
        ok = True
    except WebhookVerificationError:
        ok = False
    if FEED:
        ok = ok and verify(base64.b64decode("KEY"), {k.title(): v for k, v in h.items()}, body, "KIND")
    out.append(ok)
print(json.dumps(out))
"#;

/// Runs the book's Python snippets over `calls`: the `standardwebhooks`
/// package and, with `feed`, the `Feed-Signature` v2 check; whether each
/// call passes.
fn python(calls: &[Call], kind: Kind, feed: bool) -> Vec<bool> {
    use base64::Engine;
    let page = include_str!("../../docs/book/src/handler/signatures.md");
    let blocks: Vec<&str> = page
        .split("```python\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    let standard = blocks
        .iter()
        .find(|b| b.contains("standardwebhooks"))
        .unwrap();
    let v2 = blocks.iter().find(|b| b.contains("SIGNED = {")).unwrap();
    let requests: Vec<Value> = calls
        .iter()
        .map(|c| {
            let headers: serde_json::Map<String, Value> = c
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), json!(v.to_str().unwrap())))
                .collect();
            let body = base64::engine::general_purpose::STANDARD.encode(&c.body);
            json!({"headers": headers, "body": body})
        })
        .collect();
    let (check, v2_kind) = match kind {
        Kind::Item => ("verified", "item"),
        Kind::Event => ("verified_event", "event"),
    };
    let driver = DRIVER
        .replace("CHECK", check)
        .replace("FEED", if feed { "True" } else { "False" })
        .replace("KIND", v2_kind)
        .replace(
            "KEY",
            &base64::engine::general_purpose::STANDARD.encode(match kind {
                Kind::Item => OLD.as_bytes().to_vec(),
                Kind::Event => events_key(OLD),
            }),
        );
    let driver = format!("{standard}\n{v2}\n{driver}");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("verify.py");
    std::fs::write(&script, driver).unwrap();
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .env("FEED_SIGNING_SECRET", NEW)
        .env("FEED_EVENTS_SECRET", events_secret(NEW).unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the book's verification (CI installs it and standardwebhooks)");
    let input = serde_json::to_vec(&requests).unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed (pip install standardwebhooks): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `processor events secret` prints the events secret of each signing
/// secret given (flags or the variable, one a line during a rotation):
/// what an events receiver verifies with.
#[test]
fn the_events_secret_command_prints_each_events_secret() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["events", "secret"])
        .env("FEED_SIGNING_SECRET", format!("{NEW}\n{OLD}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let want = format!(
        "{}\n{}\n",
        events_secret(NEW).unwrap(),
        events_secret(OLD).unwrap()
    );
    assert_eq!(printed, want);
    assert!(!printed.contains(NEW) && !printed.contains(OLD));
    let none = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["events", "secret"])
        .env_remove("FEED_SIGNING_SECRET")
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no signing secret"));
}
