//! A wrong handler path: a handler that answers 404 to every item is not
//! there at that URL. Dispatch holds off and says so instead of failing
//! every item at once; one item's 404 among answers still fails that item.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::Value;

use crate::behaviour;
use crate::cli::{processor, text};
use crate::support::{InProcess, Proc, TestDb, done, metric, numbered, wait_for};

/// What the processor says while a URL answers 404 to every item.
const WRONG: &str = "the handler URL answers 404 for every item: is the path right?";

/// Partitions of `per` items each, `p0/0` on: ids of all the items.
async fn partitions(db: &TestDb, partitions: usize, per: usize) -> Vec<String> {
    let mut all = Vec::new();
    for p in 0..partitions {
        let ids = numbered(&format!("p{p}/"), per);
        db.partition_of(&format!("p{p}"), true, false, "block", &ids)
            .await;
        all.extend(ids);
    }
    all
}

/// A handler that serves `/feed` only (any other path answers 404 as a web
/// framework does), and `/fed` too once `fixed`; returns its address.
async fn serve_feed_only(fixed: Arc<AtomicBool>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |uri: Uri, _body: Bytes| {
        let fixed = fixed.clone();
        async move {
            if uri.path() == "/feed" || (fixed.load(Ordering::SeqCst) && uri.path() == "/fed") {
                done()
            } else {
                (StatusCode::NOT_FOUND, "Not Found").into_response()
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// `/readyz` of a processor, as JSON (null while it does not listen yet).
pub async fn readyz(p: &Proc) -> Value {
    let url = format!("http://{}/readyz", p.listen.as_deref().unwrap());
    match reqwest::get(&url).await {
        Ok(r) => serde_json::from_str(&r.text().await.unwrap()).unwrap(),
        Err(_) => Value::Null,
    }
}

behaviour!(a_wrong_path_holds_off_and_says_so);
/// `--handler-url` names `/fed` where the handler serves `/feed`: every
/// item is answered 404. Dispatch holds off and says the path may be wrong
/// (log, `/readyz`, `status`), no item fails or loses an attempt, and once
/// the handler serves that path every item completes.
async fn a_wrong_path_holds_off_and_says_so(db: TestDb) {
    let items = partitions(&db, 3, 20).await;
    let fixed = Arc::new(AtomicBool::new(false));
    let addr = serve_feed_only(fixed.clone()).await;
    let url = format!("http://{addr}/fed");
    let p = Proc::start(&db, &url, &[]);
    wait_for(
        "/readyz to say the path is wrong",
        Duration::from_secs(30),
        || async {
            let r = readyz(&p).await;
            r["held"]
                .as_str()
                .is_some_and(|h| h.contains(WRONG) && h.contains(&url))
        },
    )
    .await;
    let log = p.log();
    assert!(log.contains(WRONG), "{}", p.log());
    assert!(log.contains(&format!("handler={url}")), "{}", p.log());
    wait_for(
        "status to say the path is wrong",
        Duration::from_secs(30),
        || async { text(&processor(&["status", "--database-url", &db.url], "")).contains(WRONG) },
    )
    .await;
    let failed = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'failed'";
    let attempts = "SELECT COUNT(*) AS n FROM feed_items WHERE attempts > 0";
    assert_eq!(db.count(failed).await, 0, "no item failed");
    assert_eq!(db.count(attempts).await, 0, "no attempt was counted");
    fixed.store(true, Ordering::SeqCst);
    db.wait_complete(items.len() as i64).await;
    // The delivery that completed an item is its one attempt.
    let more = "SELECT COUNT(*) AS n FROM feed_items WHERE attempts > 1";
    assert_eq!(db.count(more).await, 0, "no attempt was counted before");
    wait_for("/readyz to clear", Duration::from_secs(30), || async {
        let r = readyz(&p).await;
        r["handler"] == true && r["held"].is_null()
    })
    .await;
}

behaviour!(one_items_404_among_answers_fails_that_item);
/// The handler answers 404 for one item and 2xx for the others: that item
/// fails after one attempt ("not retried", as before), the others
/// complete, and the breaker never opens.
async fn one_items_404_among_answers_fails_that_item(db: TestDb) {
    let items = partitions(&db, 3, 20).await;
    let InProcess(_h, p) = InProcess::start(&db, |c| {
        if c.item == "p1/7" {
            (StatusCode::NOT_FOUND, "no such order").into_response()
        } else {
            done()
        }
    })
    .await;
    db.wait_complete(items.len() as i64 - 1).await;
    db.wait_item("p1/7", "failed").await;
    db.assert_failed("p1/7", 1, &["HTTP 404", "no such order"])
        .await;
    let text = p.metrics().await;
    assert_eq!(metric(&text, "feed_breaker_trips_total"), 0.0);
    assert!(!p.log().contains(WRONG), "{}", p.log());
}
