//! The fleet's health from the database alone: each processor writes its
//! last five minutes with its heartbeat, and the overview, `/api/v1/status`
//! and `processor status` merge them into the handler's state, its
//! latency and the queue wait (percentiles), with each processor's calls
//! in flight and per second; without its database the overview says
//! "unknown", never zero.

use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use serde_json::{Value, json};

use crate::cli::processor;
use crate::console_api::{get, serve};
use crate::proxy::{Proxy, upstream};
use crate::support::{Backend, Handler, Proc, TestDb, done, json as reply, metric, page, wait_for};
use crate::{behaviour, on_network_backends};

behaviour!(the_overview_says_how_the_handler_does);
/// Twenty items, each call 40 ms at the handler; the first five fail
/// their first attempt (a 500) and complete on the second: 25 calls, 5 of
/// them failed (20 %, above the 10 % that makes the handler "failing"),
/// every call above 32 ms. `/api/v1/status`, `processor
/// status` (JSON and text), the overview and `/metrics` say the same.
async fn the_overview_says_how_the_handler_does(db: TestDb) {
    let h = Handler::start_async(|c| async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let first_five = c.item.len() == 2 && c.item.as_str() < "i5";
        if first_five && c.attempt == 1 {
            return reply(500, json!({"error": {"message": "not yet"}}));
        }
        done()
    })
    .await;
    let p = Proc::start(&db, &h.url(), &["--ui", "--backoff-base", "100ms"]);
    let items = (0..20).map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("i{i}")));
    let spec = PartitionSpec::default();
    db.store.enqueue("p", &spec, items.collect()).await.unwrap();
    db.wait_complete(20).await;
    let base = format!("http://{}", p.listen.as_deref().unwrap());
    let calls = |s: &Value| s["handler"]["latency"]["count"].as_u64();
    wait_for(
        "the heartbeat carries every call",
        Duration::from_secs(30),
        || async { calls(&get(&base, "/api/v1/status").await.1) == Some(25) },
    )
    .await;
    let status = get(&base, "/api/v1/status").await.1;
    let handler = &status["handler"];
    assert_eq!(handler["state"], json!("failing"), "{status}");
    assert_eq!(handler["failed_share"], json!(0.2), "{status}");
    let p50 = handler["latency"]["p50_ms"].as_f64().unwrap();
    // Every call sleeps 40 ms (the bucket above 32 ms); how much longer
    // it takes depends on the machine's load.
    let p95 = handler["latency"]["p95_ms"].as_f64().unwrap();
    assert!(p50 > 32.0 && p50 <= p95, "{status}");
    assert_eq!(status["queue_wait"]["count"], json!(25), "{status}");
    let figures = &status["processors"][0]["figures"];
    assert_eq!(
        (&figures["calls"], &figures["failed"]),
        (&json!(25), &json!(5))
    );
    assert_eq!(figures["in_flight"], json!(0), "{status}");
    assert!(
        figures["calls_per_second"].as_f64().unwrap() > 0.0,
        "{status}"
    );

    let out = processor(&["status", "--json", "--database-url", &db.url], "");
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Calls per second move as the minute goes on; the rest stays.
    for k in ["state", "reason", "failed_share", "latency"] {
        assert_eq!(cli["handler"][k], status["handler"][k], "{cli}");
    }
    assert_eq!(cli["queue_wait"], status["queue_wait"], "{cli}");
    let out = processor(&["status", "--database-url", &db.url], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("handler     failing: 20 % of the calls in the last 5 minutes failed"),
        "{text}"
    );
    assert!(
        text.contains("latency     last 5 min: handler calls p50 "),
        "{text}"
    );

    let html = page(&format!("{base}/")).await;
    assert!(html.contains(r#"data-state="failing""#), "{html}");
    assert!(html.contains("reachable, primary (takes writes)"), "{html}");
    let shown = if p50 >= 1000.0 {
        format!(r#"<td class="p50">{:.2} s</td>"#, p50 / 1000.0)
    } else {
        format!(r#"<td class="p50">{p50:.0} ms</td>"#)
    };
    assert!(html.contains(&shown), "{shown} in {html}");
    let metrics = p.metrics().await;
    let counted = metric(&metrics, "feed_handler_request_duration_seconds_count");
    assert_eq!(counted, 25.0, "{metrics}");
}

on_network_backends!(the_overview_says_unknown_without_its_database);
/// The console reaches its database through a proxy; cut, the overview
/// shows no figure (every one "unknown", none zero) and says the database
/// cannot be reached; healed, the figures come back.
async fn the_overview_says_unknown_without_its_database(db: TestDb) {
    let proxy = Proxy::start(upstream(&db.url)).await;
    let url = match db.backend {
        Backend::Postgres => format!("{}?sslmode=disable", proxy.url(&db.url)),
        _ => format!("{}?ssl-mode=disabled", proxy.url(&db.url)),
    };
    let store = feed::Store::connect_with(&url, 2, Duration::from_secs(1))
        .await
        .unwrap();
    let base = serve(store, None).await;
    let html = page(&format!("{base}/")).await;
    assert!(html.contains(r#"id="count-available">0<"#), "{html}");
    proxy.cut();
    let r = reqwest::get(format!("{base}/")).await.unwrap();
    assert!(!r.status().is_success(), "{}", r.status());
    let html = r.text().await.unwrap();
    assert!(html.contains("The database cannot be reached"), "{html}");
    assert!(
        html.contains(r#"id="live""#),
        "the script can replace the figures: {html}"
    );
    assert!(!html.contains(r#"class="count""#), "no count shown: {html}");
    assert!(html.matches("unknown").count() >= 10, "{html}");
    proxy.heal_fresh();
    wait_for("the figures come back", Duration::from_secs(30), || async {
        let r = reqwest::get(format!("{base}/")).await.unwrap();
        r.status().is_success()
            && r.text()
                .await
                .unwrap()
                .contains(r#"id="count-available">0<"#)
    })
    .await;
}
