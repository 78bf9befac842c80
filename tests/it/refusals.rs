//! Results the database refuses: the row costs only itself, an attempt is
//! counted with a backoff (no hot loop), and `last_error` is always storable.

use serde_json::json;

use crate::on_all_backends;
use crate::support::{InProcess, TestDb, json as reply, numbered};

on_all_backends!(refused_row_costs_only_itself);
/// The database refuses one item's result (a fault injected with a
/// trigger): the other items of the partition are written normally, the
/// refused one is recorded as a failed attempt that says why, and with
/// `--max-attempts 2` it fails after exactly two calls.
async fn refused_row_costs_only_itself(db: TestDb) {
    let ok = numbered("ok", 20);
    db.partition_of("p", true, false, "continue", &ok).await;
    db.item("bad", "p", 0, json!({})).await;
    db.refuse("no_poison", "feed_items", &db.data_contains("poison"))
        .await;
    let InProcess(h, _p) = InProcess::start_with(
        &db,
        |c| c.retries.max_attempts = 2,
        |c| {
            if c.item == "bad" {
                reply(200, json!({"done": true, "data": {"poison": true}}))
            } else {
                reply(200, json!({"done": true, "data": {"fine": true}}))
            }
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    for row in db.item_rows(&ok).await {
        assert_eq!(
            (row.status.as_str(), row.data),
            ("complete", json!({"fine": true}))
        );
    }
    let bad = db.assert_failed("bad", 2, &["the database refused"]).await;
    assert_eq!(bad.data, json!({}), "the refused data was not stored");
    assert_eq!(h.calls_for("bad").len(), 2, "one call per counted attempt");
}

on_all_backends!(unstorable_errors_are_cleaned);
/// Handler error messages with a NUL character (PostgreSQL refuses it in
/// text) and of 70,000 characters (more than MariaDB's TEXT holds) are
/// stored cleaned and cut, as counted attempts with a backoff.
async fn unstorable_errors_are_cleaned(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["nul", "long"])
        .await;
    let InProcess(h, _p) = InProcess::start_with(
        &db,
        |c| c.retries.max_attempts = 3,
        |c| {
            let message = if c.item == "nul" {
                "bad\u{0}byte".to_string()
            } else {
                "x".repeat(70_000)
            };
            reply(500, json!({"error": {"message": message}}))
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    let nul = db.assert_failed("nul", 3, &["bad\u{FFFD}byte"]).await;
    let err = nul.last_error.unwrap();
    assert!(!err.contains('\0'), "{err}");
    let long = db.assert_failed("long", 3, &["[cut:"]).await;
    let err = long.last_error.unwrap();
    assert!(err.len() <= 8192, "{} bytes", err.len());
    assert_eq!(h.calls_for("nul").len(), 3);
    assert_eq!(h.calls_for("long").len(), 3);
}
