//! The live overview in a real headless Chromium, during a drain: the
//! throughput figure and the chart change between two refreshes without a
//! reload; the chart's axes and units are there; the refresh control
//! changes the interval, pauses, and is remembered; the figures on the
//! page match `/api/v1/status` (and the handler's state and latency
//! `/metrics`).

use std::sync::Arc;
use std::time::Duration;

use feed::store::NewItem;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::console_api::get;
use crate::support::{Backend, Handler, Proc, TestDb, done, wait_console, wait_for};
use crate::tenants::of;
use crate::webdriver::Browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: cargo test --workspace --tests -- --ignored"]
async fn the_overview_is_live() {
    let Some(b) = Browser::start(true).await else {
        return;
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let flow = Arc::new(Semaphore::new(0));
    let h = {
        let flow = flow.clone();
        Handler::start_async(move |_| {
            let flow = flow.clone();
            async move {
                flow.acquire().await.unwrap().forget();
                done()
            }
        })
        .await
    };
    let items = (0..30).map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("i{i:02}")));
    db.store
        .enqueue("p", &of("acme"), items.collect())
        .await
        .unwrap();
    let proc = Proc::start(&db, &h.url(), &["--ui", "--request-timeout", "300s"]);
    let base = format!("http://{}", proc.listen.clone().unwrap());
    wait_for(
        "the processor to listen",
        Duration::from_secs(60),
        || async { !proc.metrics().await.is_empty() },
    )
    .await;
    wait_console(&base).await;

    b.goto(&format!("{base}/")).await;
    b.wait_text("#backlog tr.tenant", "acme").await;
    // The chart says what it counts and over what time.
    for label in ["items/min", "60 min ago", "now"] {
        b.wait_text("#completions", label).await;
    }
    assert_eq!(
        b.text("#throughput tbody tr:first-child td.completed")
            .await,
        "0.00/s"
    );
    assert_eq!(
        b.eval("document.getElementById('refresh-every').value")
            .await,
        json!("5")
    );

    // Every 2 s: the figures move as items complete, on the same page.
    choose(&b, "2").await;
    b.eval("(window.marker = 'same page')").await;
    let bars = b
        .eval("document.querySelectorAll('#completions rect').length")
        .await;
    flow.add_permits(10);
    wait_for(
        "the throughput to move",
        Duration::from_secs(30),
        || async {
            b.text("#throughput tbody tr:first-child td.completed")
                .await
                != "0.00/s"
        },
    )
    .await;
    assert_eq!(
        b.eval("window.marker").await,
        json!("same page"),
        "the page reloaded"
    );
    assert_eq!(bars, json!(0), "no bar before any completion");
    let hover = "document.querySelector('#completions rect title').textContent";
    wait_for("a bar in the chart", Duration::from_secs(30), || async {
        b.eval("document.querySelectorAll('#completions rect').length")
            .await
            != json!(0)
    })
    .await;
    let hover = b.eval(hover).await;
    assert!(
        hover
            .as_str()
            .unwrap()
            .contains("items completed in the minute from"),
        "{hover}"
    );
    b.screenshot("overview-live").await;

    // Paused: nothing is fetched while more items complete.
    choose(&b, "0").await;
    let before = b
        .eval("document.getElementById('refresh').getAttribute('data-refreshed')")
        .await;
    let shown = b.text("#throughput tbody tr:last-child td.completed").await;
    flow.add_permits(20);
    db.wait_complete(30).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        b.eval("document.getElementById('refresh').getAttribute('data-refreshed')")
            .await,
        before,
        "a paused page refreshed"
    );
    assert_eq!(
        b.text("#throughput tbody tr:last-child td.completed").await,
        shown
    );

    // Remembered across a reload; the page then agrees with the API.
    b.goto(&format!("{base}/")).await;
    assert_eq!(
        b.eval("document.getElementById('refresh-every').value")
            .await,
        json!("0")
    );
    let (_, status) = get(&base, "/api/v1/status").await;
    let api = status["throughput"]["last_15m"]["completed"]
        .as_f64()
        .unwrap();
    let page = b.text("#throughput tbody tr:last-child td.completed").await;
    assert_eq!(page, format!("{api:.2}/s"), "{status}");
    assert_eq!(
        format!("{:.2}", 30.0 / 900.0),
        format!("{api:.2}"),
        "{status}"
    );
    // The handler's state and latency as the processors' heartbeats
    // carry them: on the page, in the API and in /metrics alike.
    wait_for(
        "every call in a heartbeat",
        Duration::from_secs(30),
        || async {
            get(&base, "/api/v1/status").await.1["handler"]["latency"]["count"] == json!(30)
        },
    )
    .await;
    let (_, status) = get(&base, "/api/v1/status").await;
    b.goto(&format!("{base}/")).await;
    let state = b
        .eval("document.getElementById('handler-state').dataset.state")
        .await;
    assert_eq!(state, status["handler"]["state"], "{status}");
    assert_eq!(state, json!("answering"));
    assert_eq!(b.text("#handler-latency td.count").await, "30");
    assert_eq!(b.text("#queue-wait td.count").await, "30");
    let metrics = proc.metrics().await;
    let calls = crate::support::metric(&metrics, "feed_handler_request_duration_seconds_count");
    assert_eq!(calls, 30.0, "{metrics}");
    b.close().await;
}

/// Picks a refresh interval in the control, as a person does.
async fn choose(b: &Browser, seconds: &str) {
    b.eval(&format!(
        "(function () {{ var s = document.getElementById('refresh-every'); s.value = '{seconds}'; \
         s.dispatchEvent(new Event('change')); return s.value; }})()"
    ))
    .await;
}
