//! Fan-out, fan-in and closing (the book: Concepts).

use std::time::Duration;

use serde_json::json;

use crate::support::{InProcess, TestDb, done, json as reply};
use crate::{behaviour, on_all_backends};

behaviour!(fan_out_then_fan_in);
/// Items at gate 0 move to gate 2 or finish; nothing at gate 2 is called
/// before every gate-0 item is complete; then the partition closes.
async fn fan_out_then_fan_in(db: TestDb) {
    db.partition("resumes", true, false, "block").await;
    for i in 0..30 {
        db.item(&format!("r{i}"), "resumes", 0, json!({"n": i}))
            .await;
    }
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        let n = c.data["n"].as_i64().unwrap();
        match c.gate {
            0 if n % 3 == 0 => reply(200, json!({"gate": 2, "data": {"n": n, "classified": true}})),
            0 => done(),
            _ => reply(200, json!({"done": true, "data": {"n": n, "classified": c.data["classified"], "ranked": true}})),
        }
    }).await;
    db.wait_partition("resumes", "complete").await;
    let calls = h.calls();
    let last_gate0 = calls.iter().rposition(|c| c.gate == 0).unwrap();
    let first_gate2 = calls.iter().position(|c| c.gate == 2).unwrap();
    assert!(
        last_gate0 < first_gate2,
        "a gate-2 call came before the last gate-0 call"
    );
    assert_eq!(calls.iter().filter(|c| c.gate == 0).count(), 30);
    assert_eq!(calls.iter().filter(|c| c.gate == 2).count(), 10);
    assert!(calls.iter().all(|c| c.gate == 0 || c.gate == 2));
    let (_, gate, owner) = db.partition_row("resumes").await;
    assert_eq!(gate, 2);
    assert_eq!(owner, None, "a closed partition is released");
    let r0 = db.item_row("r0").await;
    assert_eq!((r0.status.as_str(), r0.gate), ("complete", 2));
    // The gate-2 call received the data stored by the gate-0 answer.
    assert_eq!(r0.data, json!({"n": 0, "classified": true, "ranked": true}));
    let r1 = db.item_row("r1").await;
    assert_eq!(
        (r1.status.as_str(), r1.gate, r1.data),
        ("complete", 0, json!({"n": 1}))
    );
}

behaviour!(three_steps_at_one_gate);
/// A handler-driven state machine: three steps at the same gate; the
/// stored data is the third step's.
async fn three_steps_at_one_gate(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"step": 0})).await;
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        let step = c.data["step"].as_i64().unwrap() + 1;
        reply(200, json!({"done": step == 3, "data": {"step": step}}))
    })
    .await;
    db.wait_partition("p", "complete").await;
    let row = db.item_row("i").await;
    assert_eq!(row.data, json!({"step": 3}));
    assert_eq!(row.status, "complete");
    let calls = h.calls_for("i");
    assert_eq!(calls.len(), 3);
    let keys: std::collections::HashSet<_> =
        calls.iter().map(|c| c.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), 3, "each step has its own idempotency key");
    assert!(calls.iter().all(|c| c.attempt == 1));
}

on_all_backends!(plain_sql_rows);
/// A producer writing only the required columns with plain SQL.
async fn plain_sql_rows(db: TestDb) {
    db.sql("INSERT INTO feed_partitions (id) VALUES ('plain')")
        .await;
    db.sql("INSERT INTO feed_items (id, partition_id, data) VALUES ('a', 'plain', '{\"x\": 1}'), ('b', 'plain', 'not json')")
    .await;
    let InProcess(h, _p) = InProcess::start(&db, |_| done()).await;
    db.wait_partition("plain", "complete").await;
    let calls = h.calls();
    assert_eq!(calls.len(), 2);
    let a = calls.iter().find(|c| c.item == "a").unwrap();
    assert_eq!(a.data, json!({"x": 1}));
    assert_eq!(a.partition, "plain");
    assert_eq!(a.gate, 0);
    assert_eq!(a.headers["content-type"], "application/json");
    assert_eq!(db.item_row("b").await.status, "complete");
    let b = calls.iter().find(|c| c.item == "b").unwrap();
    assert_eq!(
        b.body, b"not json",
        "data that is not JSON is forwarded as it is"
    );
}

behaviour!(auto_close_off_stays_open);
/// `auto_close = false`: everything done, the partition stays available.
async fn auto_close_off_stays_open(db: TestDb) {
    db.partition_of("open", false, false, "block", &["a"]).await;
    let InProcess(_h, _p) = InProcess::start(&db, |_| done()).await;
    db.wait_item("a", "complete").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(db.partition_status("open").await, "available");
    // New work in the open partition is picked up.
    db.item("b", "open", 0, json!({})).await;
    db.wait_item("b", "complete").await;
    assert_eq!(db.partition_status("open").await, "available");
}

behaviour!(manual_checkpoint_holds_gate);
/// `manual_checkpoint`: the gate stays until the user moves it.
async fn manual_checkpoint_holds_gate(db: TestDb) {
    db.partition_of("m", true, true, "block", &["g0"]).await;
    db.item("g1", "m", 1, json!({})).await;
    let InProcess(h, _p) = InProcess::start(&db, |_| done()).await;
    db.wait_item("g0", "complete").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (status, gate, _) = db.partition_row("m").await;
    assert_eq!((status.as_str(), gate), ("available", 0));
    assert!(
        h.calls_for("g1").is_empty(),
        "gate 1 ran without a checkpoint"
    );
    // The user advances the gate (OCC write, as the library would).
    db.sql("UPDATE feed_partitions SET gate = 1, version = version + 1 WHERE id = 'm'")
        .await;
    db.wait_partition("m", "complete").await;
    assert_eq!(h.calls_for("g1").len(), 1);
}
