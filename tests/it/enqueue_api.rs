//! Enqueue over HTTP (`POST /api/v1/partitions/{id}/items`) with the
//! producer token, on every backend: the token rules, both body formats,
//! refusals that write nothing, and the body cap.

use feed::console::{AdminToken, Console, MAX_ENQUEUE_BODY_BYTES, ProducerToken};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::behaviour;
use crate::support::TestDb;

pub const ADMIN: &str = "test-admin-token-0123456789";
pub const PRODUCER: &str = "test-producer-token-9876543210";

/// Serves the console with these tokens on a free port; returns its base URL.
pub async fn serve(store: feed::Store, admin: Option<&str>, producer: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = admin.map(|t| AdminToken::new(t).unwrap());
    let producer = producer.map(|t| ProducerToken::for_flag("--producer-token", t).unwrap());
    let app = Console::new(store, admin)
        .with_producer_token(producer)
        .router();
    tokio::spawn(async move {
        feed::server::serve(listener, app, std::future::pending())
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

/// POSTs `body` to `path` with `content_type` (None = no header) and the
/// bearer token (None = no Authorization header); the status and the
/// answer as JSON (Null when it is not JSON).
pub async fn send(
    base: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(c) = content_type {
        req = req.header("content-type", c);
    }
    let r = req.send().await.unwrap();
    let code = r.status();
    let text = r.text().await.unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Enqueues `body` (a JSON array or JSON lines) into `partition` with the
/// producer token.
pub async fn enqueue(base: &str, partition: &str, body: &str) -> (StatusCode, Value) {
    let path = format!("/api/v1/partitions/{partition}/items");
    send(base, &path, Some(PRODUCER), None, body.to_string()).await
}

pub fn message(answer: &Value) -> &str {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {answer}"))
}

fn ids(answer: &Value) -> Vec<String> {
    answer["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {answer}"))
        .iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect()
}

async fn items_in(db: &TestDb, partition: &str) -> i64 {
    db.count(&format!(
        "SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = '{partition}'"
    ))
    .await
}

async fn partitions_named(db: &TestDb, partition: &str) -> i64 {
    db.count(&format!(
        "SELECT COUNT(*) AS n FROM feed_partitions WHERE id = '{partition}'"
    ))
    .await
}

behaviour!(enqueue_tokens);
async fn enqueue_tokens(db: TestDb) {
    let item = r#"[{"data": 1}]"#;
    let path = "/api/v1/partitions/p/items";

    // No token configured at all: refused whatever is sent, saying how to configure one.
    let open = serve(db.store.clone(), None, None).await;
    for token in [None, Some(PRODUCER), Some(ADMIN)] {
        let (code, e) = send(&open, path, token, None, item).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{e}");
        assert!(message(&e).contains("--producer-token"), "{e}");
    }

    // Both configured: a missing or wrong token is unauthorized; either token enqueues.
    let both = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let (code, e) = send(&both, path, None, None, item).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{e}");
    assert!(message(&e).contains("Bearer"), "{e}");
    let wrong = Some("wrong-token-0123456789abc");
    assert_eq!(
        send(&both, path, wrong, None, item).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        items_in(&db, "p").await,
        0,
        "refused requests wrote nothing"
    );
    assert_eq!(partitions_named(&db, "p").await, 0);
    let (code, a) = send(&both, path, Some(PRODUCER), None, item).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(a["created"], true, "{a}");
    let (code, a) = send(&both, path, Some(ADMIN), None, item).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(a["created"], false, "{a}");
    assert_eq!(items_in(&db, "p").await, 2);

    // The producer token allows nothing else.
    for action in [
        "/api/v1/partitions/p/pause",
        "/api/v1/partitions/p/cancel",
        "/api/v1/partitions/p/retry",
    ] {
        let (code, e) = send(&both, action, Some(PRODUCER), None, "").await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{action}: {e}");
    }
    let (_, p) = crate::console_api::get(&both, "/api/v1/partitions/p").await;
    assert_eq!(
        (p["paused"].clone(), p["status"].clone()),
        (json!(false), json!("available")),
        "refused actions changed nothing"
    );
    // Reads of the same path stay open.
    let (code, page) = crate::console_api::get(&both, path).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(page["data"].as_array().unwrap().len(), 2, "{page}");

    // Only a producer token: it enqueues, the admin token does not exist
    // here, and actions are disabled.
    let producer_only = serve(db.store.clone(), None, Some(PRODUCER)).await;
    assert_eq!(
        send(&producer_only, path, Some(PRODUCER), None, item)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        send(&producer_only, path, Some(ADMIN), None, item).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (code, e) = send(
        &producer_only,
        "/api/v1/partitions/p/pause",
        Some(PRODUCER),
        None,
        "",
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{e}");

    // Only an admin token: it enqueues too.
    let admin_only = serve(db.store.clone(), Some(ADMIN), None).await;
    assert_eq!(
        send(&admin_only, path, Some(ADMIN), None, item).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&admin_only, path, Some(PRODUCER), None, item).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(items_in(&db, "p").await, 4);
    assert!(!db.store.partition("p").await.unwrap().paused);

    // Guessing is throttled as for actions: after 10 wrong tokens even the
    // right one waits.
    let guessed = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    for _ in 0..10 {
        assert_eq!(
            send(&guessed, path, wrong, None, item).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    let (code, e) = send(&guessed, path, Some(PRODUCER), None, item).await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "{e}");
    assert_eq!(items_in(&db, "p").await, 4);
}

behaviour!(enqueue_formats);
async fn enqueue_formats(db: TestDb) {
    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;

    // A JSON array: given ids are kept, the others get a UUID, in order.
    let array = json!([
        {"id": "arr/1", "gate": 0, "data": {"n": 1}},
        {"data": {"n": 2}},
        {"id": "arr/3", "gate": 1, "data": "three"},
    ]);
    let path = "/api/v1/partitions/arr/items";
    let (code, a) = send(
        &base,
        path,
        Some(PRODUCER),
        Some("application/json"),
        array.to_string(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(
        (
            a["partition"].clone(),
            a["items"].clone(),
            a["created"].clone(),
            a["reopened"].clone()
        ),
        (json!("arr"), json!(3), json!(true), json!(false)),
        "{a}"
    );
    let arr = ids(&a);
    assert_eq!((arr[0].as_str(), arr[2].as_str()), ("arr/1", "arr/3"));
    assert!(uuid::Uuid::parse_str(&arr[1]).is_ok(), "{a}");
    assert_eq!(items_in(&db, "arr").await, 3);
    let rows = db.item_rows(&arr).await;
    assert_eq!(rows[1].data, json!({"n": 2}));
    assert_eq!((rows[0].gate, rows[1].gate, rows[2].gate), (0, 0, 1));
    assert_eq!(rows[2].data, json!("three"));
    let p = db.store.partition("arr").await.unwrap();
    assert!(p.auto_close && !p.manual_checkpoint && p.on_failure == "block");

    // JSON lines (blank lines skipped), with the partition's settings in the query.
    let lines =
        "{\"id\": \"lines/1\", \"data\": 1}\n\n{\"data\": 2}\r\n{\"gate\": 3, \"data\": 3}\n";
    let path = "/api/v1/partitions/lines/items?auto_close=false&manual_checkpoint=true&on_failure=continue&gate_events=true";
    let (code, a) = send(
        &base,
        path,
        Some(PRODUCER),
        Some("application/x-ndjson"),
        lines,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(
        (a["items"].clone(), a["created"].clone()),
        (json!(3), json!(true))
    );
    let got = ids(&a);
    assert_eq!(got[0], "lines/1");
    assert!(
        got[1..].iter().all(|id| uuid::Uuid::parse_str(id).is_ok()),
        "{a}"
    );
    assert_eq!(items_in(&db, "lines").await, 3);
    for id in &got {
        let n = db
            .count(&format!(
                "SELECT COUNT(*) AS n FROM feed_items WHERE id = '{id}' AND partition_id = 'lines'"
            ))
            .await;
        assert_eq!(n, 1, "{id}");
    }
    let rows = db.item_rows(&got).await;
    assert_eq!((rows[1].gate, rows[2].gate), (0, 3));
    let p = db.store.partition("lines").await.unwrap();
    assert!(!p.auto_close && p.manual_checkpoint && p.on_failure == "continue");
    let gate_events =
        "SELECT COUNT(*) AS n FROM feed_partitions WHERE id = 'lines' AND gate_events";
    assert_eq!(db.count(gate_events).await, 1);

    // Without a Content-Type, and into an existing partition whose settings stay.
    let path = "/api/v1/partitions/lines/items?manual_checkpoint=false";
    let (code, a) = send(&base, path, Some(PRODUCER), None, "{\"data\": 4}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(
        (a["items"].clone(), a["created"].clone()),
        (json!(1), json!(false))
    );
    assert!(db.store.partition("lines").await.unwrap().manual_checkpoint);
    assert_eq!(items_in(&db, "lines").await, 4);

    // Adding to a complete partition reopens it.
    db.sql("UPDATE feed_items SET status = 'complete' WHERE partition_id = 'arr'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'arr'")
        .await;
    let (code, a) = enqueue(&base, "arr", "[{\"data\": 5}]").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(
        (a["created"].clone(), a["reopened"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(db.partition_status("arr").await, "available");

    // A body over axum's default 2 MB limit but under the route's cap.
    let data = "x".repeat(10 << 10);
    let big: Vec<Value> = (0..300).map(|_| json!({ "data": data })).collect();
    let big = serde_json::to_string(&big).unwrap();
    assert!(big.len() > 2 << 20);
    let (code, a) = enqueue(&base, "big", &big).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(items_in(&db, "big").await, 300);
}

behaviour!(enqueue_refusals);
async fn enqueue_refusals(db: TestDb) {
    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;

    // A malformed line rejects the whole body, naming it; nothing is written.
    let lines = "{\"data\": 1}\n{\"data\": 2}\n{\"data\": 3\n{\"data\": 4}\n";
    let (code, e) = enqueue(&base, "bad", lines).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("line 3"), "{e}");
    let lines = "{\"data\": 1}\n{\"data\": 2}\n{\"dta\": 3}\n{\"data\": 4}\n";
    let (code, e) = enqueue(&base, "bad", lines).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("line 3: unknown field `dta`"), "{e}");
    // In an array, the element is named.
    let (code, e) = enqueue(&base, "bad", r#"[{"data": 1}, {"data": 2}, 3]"#).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("item 3"), "{e}");
    let (code, e) = enqueue(&base, "bad", r#"[{"data": 1}, {"gate": -1, "data": 2}]"#).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        message(&e).contains("item 2: gate must not be negative"),
        "{e}"
    );
    for empty in ["", "[]", "\n\n"] {
        let (code, e) = enqueue(&base, "bad", empty).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{empty:?}: {e}");
        assert!(message(&e).contains("no items"), "{e}");
    }

    // An id over the length limit.
    let long = "x".repeat(256);
    let body = format!("{{\"data\": 1}}\n{{\"id\": \"{long}\", \"data\": 2}}\n");
    let (code, e) = enqueue(&base, "bad", &body).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("longer than 255 bytes"), "{e}");
    // A partition id over the limit, or with a control character.
    let (code, e) = enqueue(&base, &"p".repeat(256), "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("partition id"), "{e}");
    let (code, e) = enqueue(&base, "a%0Ab", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");

    // Query parameters that do not parse.
    for q in ["on_failure=ignore", "auto_close=maybe"] {
        let path = format!("/api/v1/partitions/bad/items?{q}");
        let (code, e) = send(&base, &path, Some(PRODUCER), None, "{\"data\": 1}").await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{q}: {e}");
        assert!(!message(&e).is_empty());
    }
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items").await,
        0,
        "nothing was written"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions").await,
        0,
        "no partition was created"
    );

    // An item below the partition's gate: refused, nothing written.
    let (code, a) = enqueue(&base, "gated", "{\"id\": \"gated/1\", \"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    db.sql("UPDATE feed_partitions SET gate = 5 WHERE id = 'gated'")
        .await;
    let body = "{\"data\": 2, \"gate\": 5}\n{\"data\": 3, \"gate\": 2}\n";
    let (code, e) = enqueue(&base, "gated", body).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        message(&e).contains("below partition gated's current gate 5"),
        "{e}"
    );
    assert_eq!(items_in(&db, "gated").await, 1);

    // A duplicate id: refused, nothing written.
    let body = "{\"id\": \"gated/2\", \"data\": 2}\n{\"id\": \"gated/1\", \"data\": 3}\n";
    let (code, e) = enqueue(&base, "gated", body).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("already exists"), "{e}");
    assert_eq!(items_in(&db, "gated").await, 1);
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 1);
}

behaviour!(enqueue_body_cap);
async fn enqueue_body_cap(db: TestDb) {
    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let data = "x".repeat(MAX_ENQUEUE_BODY_BYTES);
    let body = format!("[{{\"data\": \"{data}\"}}]");
    assert!(body.len() > MAX_ENQUEUE_BODY_BYTES);
    let (code, e) = enqueue(&base, "huge", &body).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{e}");
    let m = message(&e);
    assert!(
        m.contains(&MAX_ENQUEUE_BODY_BYTES.to_string()) && m.contains("split"),
        "{e}"
    );
    assert_eq!(partitions_named(&db, "huge").await, 0);
    assert_eq!(items_in(&db, "huge").await, 0);
}
