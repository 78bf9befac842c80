//! What Feed says back and shows: a refusal repeats only a short prefix
//! of the value it refuses, however long (a `delay` of 5.6 million U+202E
//! in a 16 MiB body got a 48 MiB answer), and stored text (a handler's
//! error, item data) shows its control and reordering characters as
//! escapes, on the console and in `status`.

use reqwest::StatusCode;
use serde_json::json;

use crate::behaviour;
use crate::cli::{enqueue_cli, processor, text};
use crate::enqueue_api::{PRODUCER, enqueue, message, serve};
use crate::support::{Handler, Proc, TestDb, no_retry};

/// Longest answer a refusal may give here: the message and a prefix of
/// the value, not the value.
const SHORT: usize = 2000;

behaviour!(refusals_repeat_a_short_prefix_of_the_value);
async fn refusals_repeat_a_short_prefix_of_the_value(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;
    let huge = "\u{202E}".repeat(300_000);
    let digits = "9".repeat(900_000);
    let lines = [
        format!(r#"{{"data": 1, "delay": "1{huge}"}}"#),
        format!(r#"{{"data": 1, "delay": "{huge}"}}"#),
        format!(r#"{{"data": 1, "delay": ["{huge}"]}}"#),
        format!(r#"{{"data": 1, "not_before": "{huge}"}}"#),
        format!(r#"{{"data": 1, "not_before": "{digits}"}}"#),
        format!(r#"{{"data": 1, "not_before": {{"{huge}": 1}}}}"#),
        format!(r#"{{"data": 1, "traceparent": "{huge}"}}"#),
        format!(r#"{{"data": 1, "gate": "{huge}"}}"#),
        format!(r#"{{"data": 1, "{huge}": 1}}"#),
        format!(r#"{{"data": 1, "gate": 1, "gate": 2, "{huge}": 1}}"#),
        format!(r#"{{"id": "{huge}", "data": 1}}"#),
    ];
    for line in &lines {
        let (code, e) = enqueue(&base, "p", line).await;
        let answer = e.to_string();
        assert_eq!(code, StatusCode::BAD_REQUEST, "{answer:.300}");
        assert!(
            answer.len() < SHORT,
            "{} bytes: {answer:.300}",
            answer.len()
        );
        let o = enqueue_cli(&db, "p", &[], &format!("{line}\n"));
        assert_eq!(o.status.code(), Some(2), "{:.300}", text(&o));
        assert!(
            o.stderr.len() < SHORT,
            "{} bytes: {:.300}",
            o.stderr.len(),
            text(&o)
        );
    }
    // The query's not_before and delay, the traceparent header, a filter.
    let reversed = "%E2%80%AE".repeat(3000);
    let client = reqwest::Client::new();
    for query in [
        format!("delay=1{reversed}"),
        format!("delay={reversed}"),
        format!("not_before={reversed}"),
        format!("not_before={}", "9".repeat(20_000)),
    ] {
        let r = client
            .post(format!("{base}/api/v1/partitions/p/items?{query}"))
            .bearer_auth(PRODUCER)
            .body("{\"data\": 1}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{query:.40}");
        let answer = r.text().await.unwrap();
        assert!(
            answer.len() < SHORT,
            "{} bytes: {answer:.300}",
            answer.len()
        );
    }
    let r = client
        .post(format!("{base}/api/v1/partitions/p/items"))
        .bearer_auth(PRODUCER)
        .header("traceparent", format!("00-{}", "a".repeat(8000)))
        .body("{\"data\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let answer = r.text().await.unwrap();
    assert!(
        answer.len() < SHORT,
        "{} bytes: {answer:.300}",
        answer.len()
    );
    let r = client
        .get(format!(
            "{base}/api/v1/partitions?status={}",
            "x".repeat(20_000)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let answer: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(message(&answer).len() < SHORT, "{answer:.300}");
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 0);
}

behaviour!(stored_text_shows_reordering_characters_escaped);
/// A handler's error holding U+202E (RIGHT-TO-LEFT OVERRIDE, which shows
/// `exe.pdf` as `fdp.exe`) and ESC, and data holding U+202E: `status` and
/// the console's pages show escapes, as they already did for ESC.
async fn stored_text_shows_reordering_characters_escaped(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("a", "p", 0, json!({"name": "x\u{202E}fdp.exe"}))
        .await;
    let h = Handler::start(|_| no_retry(500, "bad \u{202E}fdp.exe \u{1b}[31mred")).await;
    let mut p = Proc::start(&db, &h.url(), &[]);
    db.wait_partition("p", "failed").await;
    p.terminate();
    assert!(!p.log().contains('\u{202E}'), "{}", p.log());

    let o = processor(
        &["status", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !out.contains('\u{202E}') && !out.contains('\u{1b}'),
        "{out}"
    );
    assert!(out.contains("bad \\u{202e}fdp.exe \\u{1b}[31mred"), "{out}");

    let base = crate::console_api::serve(db.store.clone(), None).await;
    let page = reqwest::get(format!("{base}/partitions/p"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !page.contains('\u{202E}') && !page.contains('\u{1b}'),
        "{page}"
    );
    assert!(
        page.contains("bad \\u{202e}fdp.exe \\u{1b}[31mred"),
        "{page}"
    );
    assert!(page.contains("x\\u{202e}fdp.exe"), "{page}");
}
