//! What enqueue refuses at the door: item fields given twice, ids or
//! tenants that could pose as others (invisible, reordering and
//! line-separating characters, text not in Unicode NFC), traceparents that
//! are not W3C's, and data nested deeper than handlers' parsers go; from
//! the API, the command line and the library alike.

use reqwest::StatusCode;

use crate::behaviour;
use crate::cli::{enqueue_cli, processor, text};
use crate::enqueue_api::{PRODUCER, enqueue, message, send, serve};
use crate::support::TestDb;

behaviour!(enqueue_refuses_lookalikes_and_repeated_fields);
async fn enqueue_refuses_lookalikes_and_repeated_fields(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;

    // A field of the item given twice, whichever the body's form.
    for body in [
        "{\"id\": \"a\", \"data\": 1, \"id\": \"b\"}",
        "[{\"data\": 1, \"data\": 2}]",
        "{\"data\": 1, \"gate\": 0, \"gate\": 5}",
    ] {
        let (code, e) = enqueue(&base, "p", body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}: {e}");
        assert!(message(&e).contains("is given twice"), "{e}");
    }

    // Lookalike partition ids (percent-encoded in the path), item ids and tenants.
    let bidi = "%E2%80%AE"; // U+202E
    let (code, e) = enqueue(&base, &format!("invoice{bidi}fdp"), "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("U+202E"), "{e}");
    let (code, e) = enqueue(&base, "cafe%CC%81", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        message(&e).contains("NFC") && message(&e).contains("café"),
        "{e}"
    );
    for id in ["\\u200bitem", "a\\u2028b", "x\\ufeff"] {
        let body = format!("{{\"id\": \"{id}\", \"data\": 1}}");
        let (code, e) = enqueue(&base, "p", &body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{id}: {e}");
        assert!(message(&e).contains("item id"), "{e}");
    }
    for tenant in ["acme%E2%80%8B", "ac%E2%80%A8me", "acme%E2%81%A6"] {
        let path = format!("/api/v1/partitions/p/items?tenant={tenant}");
        let (code, e) = send(&base, &path, Some(PRODUCER), None, "{\"data\": 1}").await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{tenant}: {e}");
        assert!(message(&e).contains("tenant"), "{e}");
    }

    // The command line refuses them too, with exit code 2.
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &db.url,
            "--partition",
            "p",
            "--tenant",
            "acme\u{202E}",
        ],
        "{\"data\": 1}\n",
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "p"],
        "{\"id\": \"cafe\\u0301\", \"data\": 1}\n",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("NFC"), "{err}");

    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 0);
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_partitions").await,
        0
    );

    // The composed forms are fine.
    let (code, a) = enqueue(&base, "caf%C3%A9", "{\"id\": \"Zo\\u00eb\", \"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(db.partition_status("café").await, "available");
}

/// A valid traceparent's fields after the version.
const TRACE_FIELDS: &str = "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The traceparents stored, by item id.
async fn stored_traces(db: &TestDb) -> Vec<(String, Option<String>)> {
    db.rows(
        "SELECT id, traceparent FROM feed_items ORDER BY id",
        &["id", "traceparent"],
    )
    .await
}

behaviour!(only_w3c_traceparents_are_taken);
/// `00-1-1-1`, a 60 KB value, ESC, U+202E, NUL, uppercase and surrounding
/// whitespace were taken (SQLite stored 60 KB; PostgreSQL answered 500 and
/// the command line printed the database's error). Only W3C's form is
/// taken now, from the header, a line's field, the flag and the library;
/// a later version's extra fields are dropped.
async fn only_w3c_traceparents_are_taken(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;
    let client = reqwest::Client::new();
    let good = format!("00-{TRACE_FIELDS}");
    let tail = "x".repeat(60_000);
    let bad = [
        "00-1-1-1".to_string(),
        format!("01-{TRACE_FIELDS}{tail}"),
        format!("00-{TRACE_FIELDS}-{tail}"),
        format!("00-{TRACE_FIELDS}\\u001b"),
        format!("\\u202e00-{TRACE_FIELDS}"),
        format!("00-{TRACE_FIELDS}\\u0000"),
        format!(" 00-{TRACE_FIELDS} "),
        format!("00-{}", TRACE_FIELDS.to_uppercase()),
        format!("ff-{TRACE_FIELDS}"),
    ];
    for tp in &bad {
        let body = format!("{{\"data\": 1}}\n{{\"data\": 2, \"traceparent\": \"{tp}\"}}");
        let (code, e) = enqueue(&base, "p", &body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{tp:.80}: {e:.300}");
        let m = message(&e);
        assert!(m.starts_with("line 2: traceparent"), "{m}");
        assert!(m.contains("is not a W3C traceparent"), "{m}");
        assert!(m.len() < 1000, "{} bytes", m.len());
        let o = enqueue_cli(&db, "p", &[], &body);
        assert_eq!(o.status.code(), Some(2), "{tp:.80}: {}", text(&o));
        assert!(text(&o).contains("line 2: traceparent"), "{}", text(&o));
    }
    // The header and the flag: what a header and an argument can carry.
    let short = "x".repeat(1000);
    for tp in ["00-1-1-1".to_string(), format!("01-{TRACE_FIELDS}{short}")] {
        let r = client
            .post(format!("{base}/api/v1/partitions/p/items"))
            .bearer_auth(PRODUCER)
            .header("traceparent", &tp)
            .body("{\"data\": 1}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{tp:.80}");
        let o = enqueue_cli(&db, "p", &["--traceparent", &tp], "{\"data\": 1}\n");
        assert_eq!(o.status.code(), Some(2), "{tp:.80}: {}", text(&o));
    }
    // The library refuses it too.
    let item = feed::store::NewItem::new(b"1".to_vec())
        .with_id("lib")
        .in_trace("00-1-1-1");
    let e = db
        .store
        .enqueue("p", &feed::store::PartitionSpec::default(), vec![item])
        .await
        .unwrap_err();
    assert!(matches!(e, feed::Error::Invalid(_)), "{e}");
    assert!(e.to_string().contains("item \"lib\": traceparent"), "{e}");
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 0);

    // A later version: its known fields are kept, the rest dropped.
    let later = format!("01-{TRACE_FIELDS}-{tail}");
    let body = format!("{{\"id\": \"api\", \"data\": 1, \"traceparent\": \"{later}\"}}");
    let (code, a) = enqueue(&base, "p", &body).await;
    assert_eq!(code, StatusCode::OK, "{a}");
    let r = client
        .post(format!("{base}/api/v1/partitions/p/items"))
        .bearer_auth(PRODUCER)
        .header("traceparent", format!("01-{TRACE_FIELDS}-{short}"))
        .body("{\"id\": \"header\", \"data\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let flag = format!("01-{TRACE_FIELDS}-{short}");
    let o = enqueue_cli(
        &db,
        "p",
        &["--traceparent", &flag],
        "{\"id\": \"flag\", \"data\": 1}\n",
    );
    assert!(o.status.success(), "{}", text(&o));
    let line = format!("{{\"id\": \"line\", \"data\": 1, \"traceparent\": \"{good}\"}}\n");
    let o = enqueue_cli(&db, "p", &[], &line);
    assert!(o.status.success(), "{}", text(&o));
    let item = feed::store::NewItem::new(b"1".to_vec())
        .with_id("lib")
        .in_trace(later.clone());
    db.store
        .enqueue("p", &feed::store::PartitionSpec::default(), vec![item])
        .await
        .unwrap();
    let kept = format!("01-{TRACE_FIELDS}");
    assert_eq!(
        stored_traces(&db).await,
        vec![
            ("api".to_string(), Some(kept.clone())),
            ("flag".to_string(), Some(kept.clone())),
            ("header".to_string(), Some(kept.clone())),
            ("lib".to_string(), Some(kept)),
            ("line".to_string(), Some(good)),
        ]
    );
}

/// `n` arrays within each other.
fn nested(n: usize) -> String {
    format!("{}{}", "[".repeat(n), "]".repeat(n))
}

behaviour!(data_nested_deeper_than_128_is_refused);
/// Data nested 100,000 deep was taken and sent on, where handlers' parsers
/// fail on it (Python's `json` raises `RecursionError`) and burn its
/// attempts. Deeper than 128 is refused now, naming the line (or item)
/// and the limit, from the API and the command line; 128 is taken.
async fn data_nested_deeper_than_128_is_refused(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;
    let deep = nested(100_000);
    let object = format!("{}1{}", "{\"a\":".repeat(129), "}".repeat(129));
    for data in [&deep, &nested(129), &object] {
        let lines = format!("{{\"data\": 1}}\n{{\"data\": {data}}}\n");
        let (code, e) = enqueue(&base, "p", &lines).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{e:.300}");
        assert!(
            message(&e).starts_with("line 2: data nests arrays and objects more than 128 deep"),
            "{e}"
        );
        let array = format!("[{{\"data\": 1}}, {{\"data\": {data}}}]");
        let (code, e) = enqueue(&base, "p", &array).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{e:.300}");
        assert!(message(&e).starts_with("item 2: data nests"), "{e}");
        let o = enqueue_cli(&db, "p", &[], &lines);
        assert_eq!(o.status.code(), Some(2), "{:.300}", text(&o));
        assert!(
            text(&o).contains("line 2: data nests arrays and objects more than 128 deep"),
            "{:.300}",
            text(&o)
        );
    }
    // A --raw line that is such JSON too; one that is not JSON is data.
    let o = enqueue_cli(&db, "p", &["--raw"], &format!("1\n{}\n", nested(129)));
    assert_eq!(o.status.code(), Some(2), "{:.300}", text(&o));
    assert!(text(&o).contains("line 2: data nests"), "{:.300}", text(&o));
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 0);

    let edge = nested(128);
    let (code, a) = enqueue(
        &base,
        "p",
        &format!("{{\"id\": \"api\", \"data\": {edge}}}"),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{a}");
    let line = format!("{{\"id\": \"cli\", \"data\": {edge}}}\n");
    let o = enqueue_cli(&db, "p", &[], &line);
    assert!(o.status.success(), "{}", text(&o));
    let o = enqueue_cli(&db, "p", &["--raw"], &format!("{}\n", "[".repeat(1000)));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 3);
}
