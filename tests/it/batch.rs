//! Batch delivery (the book: Batches): one request carries a JSON array of
//! items, element i of the answer is item i's answer, and an answer that
//! is not an array of the right length fails every item of the batch.

use serde_json::{Value, json};

use crate::support::{
    Call, Handler, InProcess, Proc, Spawned, TestDb, json as reply, no_retry, signed,
};
use crate::{behaviour, on_all_backends};

/// The items of a batch request, with `Feed-Batch` checked against them.
fn items(c: &Call) -> Vec<Value> {
    let items = c.data.as_array().cloned().unwrap_or_default();
    let count = c.header("feed-batch");
    assert_eq!(count, Some(items.len().to_string().as_str()), "Feed-Batch");
    items
}

behaviour!(mixed_batch);
/// Done, next gate, error and `{}` answers in one batch each do what a
/// single answer does; items of one request come from several partitions.
async fn mixed_batch(db: TestDb) {
    db.partition("p", true, false, "continue").await;
    db.partition("q", true, false, "block").await;
    for (id, part) in [("done", "p"), ("step", "p"), ("bad", "p"), ("empty", "q")] {
        db.item(id, part, 0, json!({"id": id})).await;
    }
    let Spawned(h, _p) = Spawned::start(&db, &["--batch-size", "10"], |c| {
        let answers: Vec<Value> = items(c)
            .iter()
            .map(|i| match (i["id"].as_str().unwrap(), i["gate"].as_i64()) {
                ("done", _) => Value::Null,
                ("step", Some(0)) => json!({"gate": 1, "data": {"moved": true}}),
                ("step", _) => json!({"done": true}),
                ("bad", _) => json!({"error": {"message": "bad item", "no_retry": true}}),
                _ => json!({}),
            })
            .collect();
        reply(200, Value::Array(answers))
    })
    .await;
    db.wait_partition("p", "complete").await;
    db.wait_partition("q", "complete").await;
    let first = items(&h.calls()[0]);
    assert_eq!(first.len(), 4, "every ready item in the first batch");
    assert_eq!(first.iter().filter(|i| i["partition_id"] == "q").count(), 1);
    let step = first.iter().find(|i| i["id"] == "step").unwrap();
    assert_eq!(
        (&step["gate"], &step["attempt"], &step["data"]),
        (&json!(0), &json!(1), &json!({"id": "step"}))
    );
    assert!(
        step["idempotency_key"]
            .as_str()
            .unwrap()
            .starts_with("p/step:")
    );
    let row = |id| db.item_row(id);
    let (done, stepped, bad, empty) = (
        row("done").await,
        row("step").await,
        row("bad").await,
        row("empty").await,
    );
    assert_eq!(
        (done.status.as_str(), done.data),
        ("complete", json!({"id": "done"}))
    );
    assert_eq!((stepped.status.as_str(), stepped.gate), ("complete", 1));
    assert_eq!(stepped.data, json!({"moved": true}));
    assert_eq!(bad.status, "failed");
    assert!(bad.last_error.unwrap().contains("bad item"));
    assert_eq!(
        (empty.status.as_str(), empty.data),
        ("complete", json!({"id": "empty"}))
    );
}

behaviour!(wrong_length_fails_every_item);
/// An array one short fails every item of the batch (an attempt each,
/// retried); the next, right-length answer completes them.
async fn wrong_length_fails_every_item(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("a", "p", 0, json!(1)).await;
    db.item("b", "p", 0, json!(2)).await;
    let Spawned(h, _p) = Spawned::start(&db, &["--batch-size", "2"], |c| {
        let items = items(c);
        if items.iter().all(|i| i["attempt"] == 1) {
            reply(200, json!([null]))
        } else {
            reply(200, Value::Array(vec![Value::Null; items.len()]))
        }
    })
    .await;
    db.wait_partition("p", "complete").await;
    let first = items(&h.calls()[0]);
    assert_eq!(first.len(), 2);
    for id in ["a", "b"] {
        let row = db.item_row(id).await;
        assert_eq!((row.status.as_str(), row.attempts), ("complete", 2), "{id}");
        let attempts: Vec<Value> = h
            .calls()
            .iter()
            .flat_map(items)
            .filter(|i| i["id"] == id)
            .map(|i| i["attempt"].clone())
            .collect();
        assert_eq!(attempts, vec![json!(1), json!(2)], "{id}");
    }
}

behaviour!(non_json_data_and_signing);
/// Data that is not JSON travels as `data_base64`; the batch request is
/// signed over its body, and `--header` is sent with it.
async fn non_json_data_and_signing(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.exec(
        "INSERT INTO feed_items (id, partition_id, gate, data) VALUES (?, ?, ?, ?)",
        vec![
            "raw".into(),
            "p".into(),
            0i64.into(),
            b"\x00\xffbytes".to_vec().into(),
        ],
    )
    .await;
    db.item("json", "p", 0, json!({"n": 1})).await;
    let h = Handler::start(|c| {
        let signed = signed(c, b"batch-s3cret-0123456789", &c.body);
        let tagged = c.headers.get("x-tenant").is_some_and(|v| v == "t1");
        if !(signed && tagged) {
            return no_retry(401, "unsigned");
        }
        let answers: Vec<Value> = items(c)
            .iter()
            .map(|i| json!({"done": true, "data": {"got": i.get("data").or(i.get("data_base64"))}}))
            .collect();
        reply(200, Value::Array(answers))
    })
    .await;
    let flags = [
        "--batch-size",
        "5",
        "--signing-secret",
        "batch-s3cret-0123456789",
        "--header",
        "X-Tenant: t1",
    ];
    let _p = Proc::start(&db, &h.url(), &flags);
    db.wait_partition("p", "complete").await;
    assert_eq!(
        db.item_row("raw").await.data,
        json!({"got": "AP9ieXRlcw=="})
    );
    assert_eq!(db.item_row("json").await.data, json!({"got": {"n": 1}}));
}

on_all_backends!(items_of_one_id_in_two_partitions_each_run_once);
/// Item ids are unique within a partition: partitions `p` and `q` each
/// have items `a`, `b` and `c`, delivered in batches that mix them; each
/// of the six runs once with its own `Idempotency-Key`, both partitions
/// complete, and each row holds its own answer.
async fn items_of_one_id_in_two_partitions_each_run_once(db: TestDb) {
    for p in ["p", "q"] {
        db.partition(p, true, false, "block").await;
        for id in ["a", "b", "c"] {
            db.item(id, p, 0, json!({"p": p, "id": id})).await;
        }
    }
    let InProcess(h, _p) = InProcess::start_with(
        &db,
        |c| c.handler.batch_size = 4,
        |c| {
            let answers: Vec<Value> = items(c)
                .iter()
                .map(|i| json!({"done": true, "data": {"was": i["data"]}}))
                .collect();
            reply(200, Value::Array(answers))
        },
    )
    .await;
    db.wait_partition("p", "complete").await;
    db.wait_partition("q", "complete").await;
    let delivered: Vec<Value> = h.calls().iter().flat_map(items).collect();
    let mut keys: Vec<&str> = delivered
        .iter()
        .map(|i| i["idempotency_key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["p/a:0", "p/b:0", "p/c:0", "q/a:0", "q/b:0", "q/c:0"]);
    let rows: Vec<(String, String, Vec<u8>)> = db
        .rows(
            "SELECT partition_id, id, data FROM feed_items ORDER BY partition_id, id",
            &["partition_id", "id", "data"],
        )
        .await;
    for (p, id, data) in rows {
        let data: Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(data, json!({"was": {"p": p, "id": id}}), "{p}/{id}");
    }
}
