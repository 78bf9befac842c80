//! The JSON API under /api/v1: every endpoint and answer code, on every backend.

use feed::console::{AdminToken, Console};
use feed::store::{NewItem, PartitionSpec};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::behaviour;
use crate::support::{Backend, TestDb};

pub const TOKEN: &str = "test-admin-token-0123456789";

/// Serves the console on a free port; returns its base URL.
pub async fn serve(store: feed::Store, token: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = token.map(|t| AdminToken::new(t).unwrap());
    let app = Console::new(store, token).router();
    tokio::spawn(async move {
        feed::server::serve(listener, app, std::future::pending())
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

pub async fn enqueue(db: &TestDb, partition: &str, manual: bool, items: &[(&str, i64)]) {
    let mut spec = PartitionSpec::default();
    spec.manual_checkpoint = manual;
    let items = items
        .iter()
        .map(|(id, gate)| {
            NewItem::new(serde_json::to_vec(&json!({ "n": id })).unwrap())
                .with_id(id.to_string())
                .at_gate(*gate)
        })
        .collect();
    db.store.enqueue(partition, &spec, items).await.unwrap();
}

pub async fn get(base: &str, path: &str) -> (StatusCode, Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let code = r.status();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// POSTs with the bearer token (None = no Authorization header).
pub async fn post(
    base: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new().post(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let r = req.send().await.unwrap();
    let code = r.status();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// The admin API of a console served with [`TOKEN`].
struct Admin {
    base: String,
}

impl Admin {
    /// POSTs `action` on partition `partition`.
    async fn act(&self, partition: &str, action: &str) -> (StatusCode, Value) {
        let path = format!("/api/v1/partitions/{partition}/{action}");
        post(&self.base, &path, Some(TOKEN), None).await
    }

    /// POSTs a checkpoint of `partition` to `gate`.
    async fn checkpoint(&self, partition: &str, gate: i64) -> (StatusCode, Value) {
        let path = format!("/api/v1/partitions/{partition}/checkpoint");
        post(&self.base, &path, Some(TOKEN), Some(json!({"gate": gate}))).await
    }

    /// POSTs a retry of item `id` (escaped for the path).
    async fn retry_item(&self, id: &str) -> (StatusCode, Value) {
        let path = format!("/api/v1/items/{id}/retry");
        post(&self.base, &path, Some(TOKEN), None).await
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect()
}

/// Follows `next` through every page of a listing.
async fn all_pages(base: &str, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let (code, page) = get(base, &format!("{path}{sep}limit=2&after={after}")).await;
        assert_eq!(code, StatusCode::OK, "{page}");
        out.extend(ids(&page));
        match page["next"].as_str() {
            Some(n) => after = n.to_string(),
            None => {
                // Ids compare by the database's collation: the same set, each once.
                let mut sorted = out.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), out.len(), "{out:?}");
                return sorted;
            }
        }
    }
}

behaviour!(api_reads);
async fn api_reads(db: TestDb) {
    for p in ["a-1", "a-2", "a-3", "b-1", "x_%1", "xa1"] {
        enqueue(&db, p, false, &[(&format!("{p}/i1"), 0)]).await;
    }
    enqueue(
        &db,
        "big",
        false,
        &[
            ("big/1", 0),
            ("big/2", 0),
            ("big/3", 1),
            ("big/4", 1),
            ("big/5", 2),
        ],
    )
    .await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'b-1'")
        .await;
    db.sql("UPDATE feed_items SET status = 'failed', last_error = 'boom' WHERE id = 'big/3'")
        .await;
    let base = serve(db.store.clone(), None).await;

    // The same document as `processor status --json`.
    let (code, status) = get(&base, "/api/v1/status").await;
    assert_eq!(code, StatusCode::OK);
    let direct = serde_json::to_value(db.store.status(None).await.unwrap()).unwrap();
    assert_eq!(
        status["partitions_by_status"],
        direct["partitions_by_status"]
    );
    // Each partition's age moves between the two reads.
    let aged = |v: &Value| {
        let mut v = v["partitions"].clone();
        for p in v.as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("age_ms");
        }
        v
    };
    assert_eq!(aged(&status), aged(&direct));

    // Keyset pagination visits every partition once, in id order.
    let all = all_pages(&base, "/api/v1/partitions").await;
    assert_eq!(all, ["a-1", "a-2", "a-3", "b-1", "big", "x_%1", "xa1"]);
    assert_eq!(
        all_pages(&base, "/api/v1/partitions?prefix=a-").await,
        ["a-1", "a-2", "a-3"]
    );
    // LIKE wildcards in a prefix are literal.
    assert_eq!(
        all_pages(&base, "/api/v1/partitions?prefix=x_").await,
        ["x_%1"]
    );
    assert_eq!(
        all_pages(&base, "/api/v1/partitions?status=complete").await,
        ["b-1"]
    );

    let (code, p) = get(&base, "/api/v1/partitions/big").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(p["status"], "available");
    assert_eq!(p["items_by_gate"]["1"]["failed"], 1);
    assert_eq!(p["items_by_gate"]["0"]["available"], 2);
    assert_eq!(
        get(&base, "/api/v1/partitions/nope").await.0,
        StatusCode::NOT_FOUND
    );

    let items = all_pages(&base, "/api/v1/partitions/big/items").await;
    assert_eq!(items, ["big/1", "big/2", "big/3", "big/4", "big/5"]);
    assert_eq!(
        all_pages(&base, "/api/v1/partitions/big/items?gate=1").await,
        ["big/3", "big/4"]
    );
    assert_eq!(
        all_pages(&base, "/api/v1/partitions/big/items?status=failed").await,
        ["big/3"]
    );
    let (_, page) = get(&base, "/api/v1/partitions/big/items?status=failed").await;
    assert_eq!(page["data"][0]["last_error"], "boom");
    assert_eq!(page["data"][0]["data_preview"], r#"{"n":"big/3"}"#);
    assert_eq!(
        get(&base, "/api/v1/partitions/nope/items").await.0,
        StatusCode::NOT_FOUND
    );
    // An id with a slash is one path segment when encoded.
    assert_eq!(
        get(&base, "/api/v1/partitions/x_%251").await.0,
        StatusCode::OK
    );
}

behaviour!(api_tokens);
async fn api_tokens(db: TestDb) {
    enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let open = serve(db.store.clone(), None).await;
    let locked = serve(db.store.clone(), Some(TOKEN)).await;
    for path in ["/api/v1/partitions/p/pause", "/api/v1/items/p%2F1/retry"] {
        // No admin token configured: actions are forbidden, whatever is sent.
        assert_eq!(
            post(&open, path, Some(TOKEN), None).await.0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(post(&open, path, None, None).await.0, StatusCode::FORBIDDEN);
        // Configured: a missing or wrong token is unauthorized.
        assert_eq!(
            post(&locked, path, None, None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            post(&locked, path, Some("wrong-token-0123456789"), None)
                .await
                .0,
            StatusCode::UNAUTHORIZED
        );
    }
    // Reads stay open.
    assert_eq!(get(&locked, "/api/v1/partitions/p").await.0, StatusCode::OK);
    let (_, p) = get(&locked, "/api/v1/partitions/p").await;
    assert_eq!(p["paused"], false, "refused actions changed nothing");
}

behaviour!(api_actions);
async fn api_actions(db: TestDb) {
    enqueue(&db, "auto", false, &[("auto/1", 0), ("auto/2", 0)]).await;
    enqueue(&db, "manual", true, &[("manual/1", 0), ("manual/2", 1)]).await;
    enqueue(&db, "done", false, &[("done/1", 0)]).await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'done'")
        .await;
    db.sql("UPDATE feed_items SET status = 'complete' WHERE partition_id = 'done'")
        .await;
    let admin = Admin {
        base: serve(db.store.clone(), Some(TOKEN)).await,
    };

    // Pause and resume answer the new state; both are idempotent.
    let (code, p) = admin.act("auto", "pause").await;
    assert_eq!((code, p["paused"].clone()), (StatusCode::OK, json!(true)));
    assert_eq!(admin.act("auto", "pause").await.0, StatusCode::OK);
    let (code, p) = admin.act("auto", "resume").await;
    assert_eq!((code, p["paused"].clone()), (StatusCode::OK, json!(false)));
    assert_eq!(admin.act("nope", "pause").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        admin.act("auto", "explode").await.0,
        StatusCode::BAD_REQUEST
    );

    // Checkpoint: only manual partitions, only upwards, only when the gate is drained.
    let (code, e) = admin.checkpoint("auto", 1).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a manual_checkpoint"),
        "{e}"
    );
    assert_eq!(
        admin.act("manual", "checkpoint").await.0,
        StatusCode::BAD_REQUEST
    );
    let (code, e) = admin.checkpoint("manual", 1).await;
    assert_eq!(
        code,
        StatusCode::CONFLICT,
        "manual/1 is still available at gate 0"
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("still has available items"),
        "{e}"
    );
    db.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'manual/1'")
        .await;
    // A browser form may send these to any site with no preflight: the
    // API refuses them before reading the body, and nothing moves.
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = reqwest::Client::new()
            .post(format!(
                "{}/api/v1/partitions/manual/checkpoint",
                admin.base
            ))
            .bearer_auth(TOKEN)
            .header("content-type", kind)
            .body(r#"{"gate": 1}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{kind}");
        let e: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("send application/json"),
            "{e}"
        );
    }
    assert_eq!(
        db.partition_row("manual").await.1,
        0,
        "a refused body moved the gate"
    );
    let (code, p) = admin.checkpoint("manual", 1).await;
    assert_eq!((code, p["gate"].clone()), (StatusCode::OK, json!(1)));
    let (code, e) = admin.checkpoint("manual", 1).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not above"),
        "{e}"
    );
    assert_eq!(admin.checkpoint("nope", 1).await.0, StatusCode::NOT_FOUND);

    // Retry: a failed item, then its partition; nothing failed is a conflict.
    assert_eq!(admin.act("auto", "retry").await.0, StatusCode::CONFLICT);
    db.sql("UPDATE feed_items SET status = 'failed', attempts = 5 WHERE id = 'auto/1'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'failed' WHERE id = 'auto'")
        .await;
    let (code, item) = admin.retry_item("auto%2F1").await;
    assert_eq!(code, StatusCode::OK, "{item}");
    assert_eq!(
        (item["status"].clone(), item["attempts"].clone()),
        (json!("available"), json!(0))
    );
    assert_eq!(
        db.partition_status("auto").await,
        "available",
        "its partition reopened"
    );
    assert_eq!(admin.retry_item("auto%2F1").await.0, StatusCode::CONFLICT);
    assert_eq!(admin.retry_item("nope").await.0, StatusCode::NOT_FOUND);
    db.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'auto/2'")
        .await;
    let (code, p) = admin.act("auto", "retry").await;
    assert_eq!(
        (code, p["items_by_status"]["available"].clone()),
        (StatusCode::OK, json!(2))
    );

    // Cancel: the partition and its available items; idempotent; then nothing applies.
    let (code, p) = admin.act("auto", "cancel").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        (p["status"].clone(), p["owner"].clone()),
        (json!("cancelled"), Value::Null)
    );
    assert_eq!(p["items_by_status"]["cancelled"], 2);
    assert_eq!(admin.act("auto", "cancel").await.0, StatusCode::OK);
    for a in ["pause", "resume", "retry"] {
        assert_eq!(admin.act("auto", a).await.0, StatusCode::CONFLICT, "{a}");
    }
    db.sql("UPDATE feed_items SET status = 'failed' WHERE id = 'auto/1'")
        .await;
    assert_eq!(admin.retry_item("auto%2F1").await.0, StatusCode::CONFLICT);
    assert_eq!(admin.act("done", "cancel").await.0, StatusCode::CONFLICT);
    assert_eq!(admin.act("nope", "cancel").await.0, StatusCode::NOT_FOUND);
}

/// Page actions need the login cookie and the form's CSRF token; the
/// cookie is HttpOnly and SameSite and is not the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_forms_need_login_and_csrf() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let open = serve(db.store.clone(), None).await;
    let base = serve(db.store.clone(), Some(TOKEN)).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = |url: String, body: &str, cookie: Option<String>| {
        let mut r = http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string());
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };
    let pause = |b: &str| format!("{b}/partitions/p/pause");
    let r = form(pause(&open), "csrf=x&confirm=yes", None)
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "no admin token configured"
    );
    let r = form(pause(&base), "csrf=x&confirm=yes", None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "not logged in");

    let login = |body: &str| form(format!("{base}/login"), body, None);
    let r = login("token=wrong-token-0123456789").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = login("token=test-admin-token-0123456789&next=//evil.example/")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/", "only local redirects");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(TOKEN), "the cookie carries the token");
    let cookie = set.split(';').next().unwrap().to_string();

    let r = form(
        pause(&base),
        "csrf=forged&confirm=yes",
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "a forged CSRF token");
    let page = http
        .get(format!("{base}/partitions/p"))
        .header("cookie", cookie.clone());
    let page = page.send().await.unwrap().text().await.unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(!page.contains(TOKEN));
    let body: &'static str = Box::leak(format!("csrf={csrf}").into_boxed_str());
    let r = form(pause(&base), body, Some(cookie.clone()))
        .await
        .unwrap();
    let confirm = r.text().await.unwrap();
    assert!(
        confirm.contains("Pause partition p?"),
        "asks first: {confirm}"
    );
    assert!(
        !db.store.partition("p").await.unwrap().paused,
        "not before confirming"
    );
    let r = form(
        pause(&base),
        &format!("csrf={csrf}&confirm=yes"),
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(db.store.partition("p").await.unwrap().paused);

    // Each login is a session of its own, and logout ends it on the
    // server: a copy of the cookie stops working, another login does not.
    let r = login(&format!("token={TOKEN}")).await.unwrap();
    let other = r.headers()["set-cookie"].to_str().unwrap();
    let other = other.split(';').next().unwrap().to_string();
    assert_ne!(other, cookie, "a new session id per login");
    let r = form(format!("{base}/logout"), body, Some(cookie.clone()))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let resume = format!("{base}/partitions/p/resume");
    let r = form(
        resume.clone(),
        &format!("csrf={csrf}&confirm=yes"),
        Some(cookie),
    )
    .await
    .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "the copied cookie is dead"
    );
    let r = form(resume, &format!("csrf={csrf}&confirm=yes"), Some(other))
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "the first login's CSRF token is not the second's"
    );
}

/// Sends `method` to `path` with the bearer token (None = no
/// Authorization header) and a raw JSON body.
pub async fn send(
    method: reqwest::Method,
    base: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let r = req.send().await.unwrap();
    let code = r.status();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// `PUT /api/v1/limits/{tenant}` (the tenant escaped for the path) with the admin token.
async fn put_limit(base: &str, tenant: &str, body: &str) -> (StatusCode, Value) {
    let path = format!("/api/v1/limits/{tenant}");
    send(reqwest::Method::PUT, base, &path, Some(TOKEN), Some(body)).await
}

/// `DELETE /api/v1/limits/{tenant}` with the admin token.
async fn delete_limit(base: &str, tenant: &str) -> (StatusCode, Value) {
    let path = format!("/api/v1/limits/{tenant}");
    send(reqwest::Method::DELETE, base, &path, Some(TOKEN), None).await
}

/// A `feed_limits` row: tenant, max_in_flight, rate, burst, weight.
pub type LimitRow = (String, Option<i32>, Option<f64>, Option<i32>, Option<i32>);

/// `feed_limits` as stored, by tenant.
pub async fn limit_rows(db: &TestDb) -> Vec<LimitRow> {
    db.rows(
        "SELECT tenant, max_in_flight, rate, burst, weight FROM feed_limits ORDER BY tenant",
        &["tenant", "max_in_flight", "rate", "burst", "weight"],
    )
    .await
}

fn message(e: &Value) -> &str {
    e["error"]["message"].as_str().unwrap_or_default()
}

behaviour!(api_limits);
async fn api_limits(db: TestDb) {
    let base = serve(db.store.clone(), Some(TOKEN)).await;
    assert_eq!(
        get(&base, "/api/v1/limits").await,
        (StatusCode::OK, json!([]))
    );

    // Set every limit: the answer is the new limit, as stored.
    let (code, l) = put_limit(
        &base,
        "acme",
        r#"{"max_in_flight": 10, "rate": "100/s", "burst": 20, "weight": 3}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{l}");
    let acme =
        json!({"tenant": "acme", "max_in_flight": 10, "rate": 100.0, "burst": 20, "weight": 3});
    assert_eq!(l, acme);
    assert_eq!(
        limit_rows(&db).await,
        [("acme".into(), Some(10), Some(100.0), Some(20), Some(3))]
    );

    // A partial update keeps the fields it does not name.
    let (code, l) = put_limit(&base, "acme", r#"{"rate": "30/m"}"#).await;
    assert_eq!(code, StatusCode::OK, "{l}");
    assert_eq!(
        l,
        json!({"tenant": "acme", "max_in_flight": 10, "rate": 0.5, "burst": 20, "weight": 3})
    );
    let (code, _) = put_limit(&base, "acme", r#"{"weight": 5}"#).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        limit_rows(&db).await,
        [("acme".into(), Some(10), Some(0.5), Some(20), Some(5))]
    );
    // An empty body changes nothing.
    let (code, l) = put_limit(&base, "acme", "").await;
    assert_eq!((code, l["weight"].clone()), (StatusCode::OK, json!(5)));

    // null removes one; a max in flight of 0 is no cap; a number is items per second.
    let (code, l) = put_limit(
        &base,
        "acme",
        r#"{"burst": null, "max_in_flight": 0, "rate": 250}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{l}");
    assert_eq!(
        l,
        json!({"tenant": "acme", "max_in_flight": null, "rate": 250.0, "burst": null, "weight": 5})
    );
    assert_eq!(
        limit_rows(&db).await,
        [("acme".into(), None, Some(250.0), None, Some(5))]
    );

    // Bad values are refused with what to write, and change nothing.
    for (body, says) in [
        (r#"{"rate": "fast"}"#, "e.g. 500/s, 30/m or 1000/h"),
        (r#"{"rate": "5/d"}"#, "e.g. 500/s, 30/m or 1000/h"),
        (r#"{"rate": 0}"#, "is not a rate"),
        (r#"{"weight": 0}"#, "from 1 to 1000"),
        (r#"{"weight": 1001}"#, "from 1 to 1000"),
        (r#"{"max_in_flight": -1}"#, "whole number"),
        (r#"{"burst": "ten"}"#, "whole number"),
        (r#"{"colour": "red"}"#, "unknown field"),
        (r#"{"weight": 2, "weight": 900}"#, "given twice"),
        ("max_in_flight=3", "JSON object"),
    ] {
        let (code, e) = put_limit(&base, "acme", body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}: {e}");
        assert!(message(&e).contains(says), "{body}: {e}");
    }
    let (_, e) = put_limit(&base, "acme", r#"{"rate": "fast"}"#).await;
    assert_eq!(
        message(&e),
        r#""fast" is not a rate: write a positive count per unit, e.g. 500/s, 30/m or 1000/h, or null for no rate"#
    );
    let (code, e) = put_limit(&base, "bad%0Aname", r#"{"weight": 2}"#).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("control character"), "{e}");
    let long = "t".repeat(256);
    assert_eq!(
        put_limit(&base, &long, "{}").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        limit_rows(&db).await,
        [("acme".into(), None, Some(250.0), None, Some(5))]
    );

    // A second tenant, whose name needs escaping; the list is by tenant.
    let (code, l) = put_limit(&base, "team%2Fb", r#"{"max_in_flight": 4}"#).await;
    assert_eq!(code, StatusCode::OK, "{l}");
    assert_eq!(
        l,
        json!({"tenant": "team/b", "max_in_flight": 4, "rate": null, "burst": null, "weight": null})
    );
    let (code, list) = get(&base, "/api/v1/limits").await;
    assert_eq!(code, StatusCode::OK);
    let tenants: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["acme", "team/b"]);
    assert_eq!(list[0]["rate"], 250.0);

    // A partition names its tenant; the API shows it.
    let mut spec = PartitionSpec::default();
    spec.tenant = Some("acme".into());
    db.store.enqueue("acme-1", &spec, vec![]).await.unwrap();
    enqueue(&db, "plain", false, &[("plain/1", 0)]).await;
    assert_eq!(
        get(&base, "/api/v1/partitions/acme-1").await.1["tenant"],
        "acme"
    );
    assert_eq!(
        get(&base, "/api/v1/partitions/plain").await.1["tenant"],
        Value::Null
    );
    let (_, page) = get(&base, "/api/v1/partitions?prefix=acme").await;
    assert_eq!(page["data"][0]["tenant"], "acme");

    // Clear: removed once, then nothing to remove.
    assert_eq!(
        delete_limit(&base, "acme").await,
        (StatusCode::OK, json!({"tenant": "acme", "removed": true}))
    );
    assert_eq!(
        delete_limit(&base, "acme").await,
        (StatusCode::OK, json!({"tenant": "acme", "removed": false}))
    );
    assert_eq!(
        delete_limit(&base, "team%2Fb").await,
        (StatusCode::OK, json!({"tenant": "team/b", "removed": true}))
    );
    assert!(limit_rows(&db).await.is_empty());
    assert_eq!(
        get(&base, "/api/v1/limits").await,
        (StatusCode::OK, json!([]))
    );
    // Other methods are refused in the API's shape.
    let (code, e) = send(
        reqwest::Method::POST,
        &base,
        "/api/v1/limits/acme",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    assert!(e["error"]["message"].is_string(), "{e}");
}

behaviour!(api_limits_tokens);
async fn api_limits_tokens(db: TestDb) {
    db.store
        .set_limit(&feed::store::limits::Limit {
            tenant: "acme".into(),
            max_in_flight: Some(3),
            ..Default::default()
        })
        .await
        .unwrap();
    let open = serve(db.store.clone(), None).await;
    let locked = serve(db.store.clone(), Some(TOKEN)).await;
    let body = Some(r#"{"max_in_flight": 9}"#);
    for method in [reqwest::Method::PUT, reqwest::Method::DELETE] {
        let path = "/api/v1/limits/acme";
        // No admin token configured: forbidden, whatever is sent.
        for token in [Some(TOKEN), None] {
            let (code, e) = send(method.clone(), &open, path, token, body).await;
            assert_eq!(code, StatusCode::FORBIDDEN, "{method} {e}");
            assert!(message(&e).contains("--admin-token"), "{e}");
        }
        // Configured: a missing or wrong token is unauthorized.
        for token in [None, Some("wrong-token-0123456789")] {
            let (code, e) = send(method.clone(), &locked, path, token, body).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{method} {e}");
            assert!(message(&e).contains("Bearer"), "{e}");
        }
    }
    // A wrong token is refused before a bad body is read.
    let (code, _) = send(
        reqwest::Method::PUT,
        &locked,
        "/api/v1/limits/acme",
        None,
        Some(r#"{"rate": "fast"}"#),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    // The page's forms need a login (and no token configured forbids them).
    let http = reqwest::Client::new();
    for (base, code) in [
        (&open, StatusCode::FORBIDDEN),
        (&locked, StatusCode::UNAUTHORIZED),
    ] {
        for (path, form) in [
            ("/limits", "csrf=x&confirm=yes&tenant=acme&max_in_flight=9"),
            ("/limits/acme/clear", "csrf=x&confirm=yes"),
        ] {
            let r = http
                .post(format!("{base}{path}"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), code, "{path}");
        }
    }
    // Reads stay open, and the refused requests changed nothing.
    for base in [&open, &locked] {
        let (code, list) = get(base, "/api/v1/limits").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(list[0]["max_in_flight"], 3);
    }
    assert_eq!(
        limit_rows(&db).await,
        [("acme".into(), Some(3), None, None, None)]
    );
    // The right token does it.
    let (code, l) = send(
        reqwest::Method::PUT,
        &locked,
        "/api/v1/limits/acme",
        Some(TOKEN),
        body,
    )
    .await;
    assert_eq!(
        (code, l["max_in_flight"].clone()),
        (StatusCode::OK, json!(9))
    );
}
