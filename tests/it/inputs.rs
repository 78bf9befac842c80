//! What the HTTP API takes and tells: a misspelt query parameter is
//! refused by name, impossible export filters are refused (over HTTP and
//! by `processor export`), the database's own error text stays in the log,
//! and until the schema is migrated the API answers 503.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};

use crate::behaviour;
use crate::console_api::TOKEN;
use crate::support::{Backend, EmptyDb, Handler, Proc, TestDb};

/// A request's status and its answer as JSON (Null when not JSON).
async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = req.send().await.unwrap();
    let code = r.status();
    let text = r.text().await.unwrap();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A processor serving the console with the admin token; its base URL
/// once it listens (`ready`: once its API is ready).
async fn console(db: &TestDb, ready: bool) -> (Proc, Handler, String) {
    let h = Handler::start(|_| crate::support::done()).await;
    let p = Proc::start(db, &h.url(), &["--ui", "--admin-token", TOKEN]);
    let base = format!("http://{}", p.listen.clone().unwrap());
    crate::support::wait_for("the console", Duration::from_secs(30), || async {
        reqwest::get(format!("{base}/healthz")).await.is_ok()
    })
    .await;
    if ready {
        crate::support::wait_console(&base).await;
    }
    (p, h, base)
}

behaviour!(misspelt_parameters_and_impossible_filters_answer_400);
/// Every API route that takes query parameters refuses one it does not
/// know, naming it (`?tennant=acme&on_falure=continue` used to create the
/// partition without a tenant and with `block`); an export or listing for
/// a status no item can have or a gate out of range is refused, over HTTP
/// and by `processor export`, rather than looking like an empty partition.
async fn misspelt_parameters_and_impossible_filters_answer_400(db: TestDb) {
    crate::console_api::enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let base = crate::console_api::serve(db.store.clone(), Some(TOKEN)).await;
    let c = reqwest::Client::new();
    let enqueue = c
        .post(format!(
            "{base}/api/v1/partitions/x/items?tennant=acme&on_falure=continue"
        ))
        .bearer_auth(TOKEN)
        .body(json!([{"data": 1}]).to_string());
    let (code, e) = send(enqueue).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("tennant"),
        "{e}"
    );
    assert!(
        db.store.partition("x").await.is_err(),
        "nothing was created"
    );
    for (path, names) in [
        ("/api/v1/partitions?stauts=failed", "stauts"),
        ("/api/v1/partitions/p/items?gat=1", "gat"),
        ("/api/v1/partitions/p/items.ndjson?stat=failed", "stat"),
        ("/api/v1/events?partiton=p", "partiton"),
        ("/api/v1/partitions/p/items.ndjson?status=bogus", "bogus"),
        ("/api/v1/partitions/p/items.ndjson?gate=-1", "out of range"),
        (
            "/api/v1/partitions/p/items.ndjson?gate=9007199254740993",
            "out of range",
        ),
        ("/api/v1/partitions/p/items?gate=-1", "out of range"),
    ] {
        let (code, e) = send(c.get(format!("{base}{path}"))).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{path}: {e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{path}: {e}");
    }
    for path in [
        "/api/v1/partitions?status=available&prefix=p&after=&limit=5",
        "/api/v1/partitions/p/items?gate=0&status=available&limit=5",
        "/api/v1/partitions/p/items.ndjson?status=available&gate=0",
        "/api/v1/events?partition=p&status=pending&limit=5",
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    for filter in ["--status=bogus", "--gate=-1"] {
        let args = [
            "export",
            "--database-url",
            &db.url,
            "--partition",
            "p",
            filter,
        ];
        let o = crate::cli::processor(&args, "");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "export {filter} exits non-zero");
        assert!(
            err.contains("bogus") || err.contains("out of range"),
            "{filter}: {err}"
        );
        assert!(o.stdout.is_empty());
    }
}

behaviour!(database_text_stays_in_the_log);
/// A duplicate item id is refused with Feed's own message; the database's
/// words for it (the constraint, its code, SQLite's `UNIQUE constraint
/// failed`, PostgreSQL's `feed_items_pkey`, MariaDB's `Duplicate entry`)
/// go to the log only.
async fn database_text_stays_in_the_log(db: TestDb) {
    crate::console_api::enqueue(&db, "p", false, &[("taken", 0)]).await;
    let (mut p, _h, base) = console(&db, true).await;
    let again = reqwest::Client::new()
        .post(format!("{base}/api/v1/partitions/p/items"))
        .bearer_auth(TOKEN)
        .body(json!([{"id": "taken", "data": 1}]).to_string());
    let (code, e) = send(again).await;
    assert!(code.is_client_error(), "{code}: {e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("already exists"), "{message}");
    let internals = [
        "UNIQUE",
        "pkey",
        "Duplicate entry",
        "code:",
        "constraint",
        "Execution Error",
        "error returned from database",
        "feed_items",
    ];
    for word in internals {
        assert!(!message.contains(word), "{word:?} in {message:?}");
    }
    p.terminate();
    let log = p.log();
    assert!(
        ["UNIQUE", "feed_items_pkey", "Duplicate entry"]
            .iter()
            .any(|w| log.contains(w)),
        "the detail is in the log:\n{}",
        crate::support::tail(&log, 20)
    );
}

/// Keeps migrations from finishing on `db` until the returned transaction
/// ends: its first statement waits on a lock taken on the table of
/// applied migrations (created here as the migrator would create it).
async fn hold_migrations(db: &TestDb) -> sea_orm::DatabaseTransaction {
    db.sql("CREATE TABLE feed_migrations (version VARCHAR(255) NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL)")
        .await;
    let txn = db.store.connection().begin().await.unwrap();
    let hold = match db.backend {
        Backend::Postgres | Backend::Citus => "LOCK TABLE feed_migrations IN ACCESS EXCLUSIVE MODE",
        Backend::Mysql => "LOCK TABLES feed_migrations WRITE",
        // SQLite has one writer: this uncommitted write keeps the migrator's.
        Backend::Sqlite => "INSERT INTO feed_migrations VALUES ('held', 0)",
    };
    txn.execute_unprepared(hold).await.unwrap();
    txn
}

behaviour!(the_api_answers_503_until_migrated);
/// On a fresh database whose migrations cannot finish yet, `run --ui`
/// answers `/healthz` but `/readyz` says the schema is not there, and the
/// API (an enqueue, a listing) and the pages answer 503 with
/// `Retry-After`, not 500 with the database's "no such table"; once
/// migrated, the same enqueue succeeds.
async fn the_api_answers_503_until_migrated(db: EmptyDb) {
    let db = db.0;
    let held = hold_migrations(&db).await;
    let (_p, _h, base) = console(&db, false).await;
    let (code, ready) = send(reqwest::Client::new().get(format!("{base}/readyz"))).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready["schema"], json!(false), "{ready}");
    let c = reqwest::Client::new();
    let enqueue = || {
        c.post(format!("{base}/api/v1/partitions/early/items"))
            .bearer_auth(TOKEN)
            .body(json!([{"data": 1}]).to_string())
    };
    let r = enqueue().send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    let e: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(
        e["error"]["message"].as_str().unwrap().contains("starting"),
        "{e}"
    );
    for path in ["/api/v1/partitions", "/"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{path}");
    }
    if db.backend == Backend::Mysql {
        held.execute_unprepared("UNLOCK TABLES").await.unwrap();
    }
    held.rollback().await.unwrap();
    crate::support::wait_for(
        "the enqueue after migrations",
        Duration::from_secs(60),
        || async { enqueue().send().await.unwrap().status() == StatusCode::OK },
    )
    .await;
    assert_eq!(db.store.partition("early").await.unwrap().id, "early");
}
