//! Steps (the book: Writing a handler, Steps): an answer without `done`
//! ends the item, and a handler that never says done cannot loop.

use std::time::Duration;

use serde_json::json;

use crate::behaviour;
use crate::support::{InProcess, TestDb, json as reply};

behaviour!(an_answer_without_done_completes_the_item);
/// `{"data": …}` with no `done` completes the item with that data, in one
/// call; `{"gate": 1}` with no `done` moves it to gate 1 instead.
async fn an_answer_without_done_completes_the_item(db: TestDb) {
    db.partition_of("p", true, false, "block", &["a", "b"])
        .await;
    db.item("m", "p", 0, json!({"move": true})).await;
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        if c.gate == 1 {
            reply(200, json!({"done": true}))
        } else if c.data.get("move").is_some() {
            reply(200, json!({"gate": 1}))
        } else {
            reply(200, json!({"data": {"seen": c.item}}))
        }
    })
    .await;
    db.wait_partition("p", "complete").await;
    for id in ["a", "b"] {
        assert_eq!(h.calls_for(id).len(), 1, "{id} was called again");
        let row = db.item_row(id).await;
        assert_eq!(
            (row.status.as_str(), row.data),
            ("complete", json!({"seen": id}))
        );
    }
    let gates: Vec<i64> = h.calls_for("m").iter().map(|c| c.gate).collect();
    assert_eq!(gates, [0, 1], "a gate without done moves the item");
}

behaviour!(never_done_fails_at_the_step_bound);
/// A handler that answers `"done": false` every time: each item is called
/// exactly `--max-steps` times, each step waits longer than the one
/// before, and the item fails with a message that names the flag; the
/// other items of the partition are not held up.
async fn never_done_fails_at_the_step_bound(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["loop", "fine"])
        .await;
    let InProcess(h, _p) = InProcess::start_with(
        &db,
        |c| c.retries.max_steps = 5,
        |c| {
            if c.item == "loop" {
                reply(
                    200,
                    json!({"done": false, "data": {"n": c.data["n"].as_i64().unwrap_or(0) + 1}}),
                )
            } else {
                reply(200, json!({"done": true}))
            }
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    let row = db
        .assert_failed(
            "loop",
            1,
            &["done:false 5 times in a row at gate 0", "--max-steps 5"],
        )
        .await;
    assert_eq!(
        row.data,
        json!({"n": 4}),
        "the last stored step's data is kept"
    );
    let calls = h.calls_for("loop");
    assert_eq!(calls.len(), 5, "calls past the step bound");
    // Steps 1 to 4 waited 10, 20, 30 and 40 ms (database clock, in ms).
    let span = calls[4].at - calls[0].at;
    assert!(
        span >= Duration::from_millis(95),
        "steps were not spaced: {span:?}"
    );
    let keys: std::collections::HashSet<_> = calls.iter().map(|c| &c.idempotency_key).collect();
    assert_eq!(keys.len(), 5, "each step has its own key");
    assert_eq!(db.item_row("fine").await.status, "complete");
}
