//! An answer spawns items (`"items"` in an answer): a folder item lists
//! its files as children and adds the fan-in that sums them; the children
//! join the partition with the folder's result, under its fence, once,
//! even while processors die; an answer that breaks a bound fails its
//! attempt and says why.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::behaviour;
use crate::fan_in::read_inputs;
use crate::support::{Call, Handler, Proc, TestDb, json as reply, wait_for};

/// Files in the folder.
const FILES: i64 = 1_000;

/// The folder's answer: a child per file (ids derived from the folder's
/// step) and the fan-in `sum` at gate 1.
fn folder_answer() -> Value {
    let mut items: Vec<Value> = (0..FILES).map(|n| json!({"data": {"size": n}})).collect();
    items.push(json!({"id": "sum", "gate": 1, "data": null}));
    json!({"data": {"listed": FILES}, "items": items})
}

/// The handler of the folder scene: `folder` spawns, each file answers
/// its size, `sum` adds the sizes through `Feed-Inputs` and counts the
/// inputs it saw complete.
async fn answer(c: Call) -> axum::response::Response {
    match (c.item.as_str(), c.gate) {
        ("folder", _) => reply(200, folder_answer()),
        ("sum", _) => {
            let url = c.header("feed-inputs").expect("a fan-in gets Feed-Inputs");
            let (mut total, mut complete) = (0, 0);
            read_inputs(url, |line| {
                let input: Value = serde_json::from_slice(line).unwrap();
                if input["status"] == "complete" {
                    complete += 1;
                }
                total += input["data"]["size"].as_i64().unwrap_or(0);
            })
            .await;
            reply(200, json!({"data": {"total": total, "complete": complete}}))
        }
        _ => reply(200, json!({"data": {"size": c.data["size"]}})),
    }
}

/// Partition `f` holding the one item `folder`.
async fn folder(db: &TestDb) {
    db.partition("f", true, false, "block").await;
    db.items("f", 0, &["folder"]).await;
}

/// What every folder test checks at the end: 1,002 items, each file's
/// child complete with the folder as its parent, its step delivered under
/// one `Idempotency-Key`, and the fan-in summing every size after the
/// last of them.
async fn check_folder(db: &TestDb, h: &Handler) {
    db.wait_partition("f", "complete").await;
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = 'f'")
            .await,
        FILES + 2
    );
    assert_eq!(
        db.count(
            "SELECT COUNT(*) AS n FROM feed_items WHERE parent_id = 'folder' AND status = 'complete'"
        )
        .await,
        FILES + 1
    );
    let calls = h.calls();
    let folder_key = &calls
        .iter()
        .find(|c| c.item == "folder")
        .unwrap()
        .idempotency_key;
    let mut keys: HashMap<&str, HashSet<&str>> = HashMap::new();
    for c in calls.iter().filter(|c| c.gate == 0 && c.item != "folder") {
        // Named for the step that spawned them: `folder:<version>/<n>`.
        let step = folder_key.strip_prefix("f/").unwrap();
        assert!(c.item.starts_with(&format!("{step}/")), "{}", c.item);
        keys.entry(&c.item).or_default().insert(&c.idempotency_key);
    }
    assert_eq!(keys.len() as i64, FILES, "every file ran");
    assert!(keys.values().all(|k| k.len() == 1), "one step per file");
    // Export and the API's item lists name each child's parent.
    let out = crate::cli::processor(
        &[
            "export",
            "--database-url",
            &db.url,
            "--partition",
            "f",
            "--gate",
            "1",
        ],
        "",
    );
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&line["id"], &line["parent_id"]),
        (&json!("sum"), &json!("folder"))
    );
    let mut filter = feed::store::listing::ItemFilter::default();
    (filter.gate, filter.limit) = (Some(1), 10);
    let page = db.store.items("f", &filter).await.unwrap();
    assert_eq!(page.data[0].parent_id.as_deref(), Some("folder"));
    let base = crate::console_api::serve(db.store.clone(), None).await;
    let html = crate::support::page(&format!("{base}/partitions/f?gate=1")).await;
    assert!(html.contains("spawned by <code>folder</code>"), "{html}");
    let sum: Value =
        serde_json::from_slice(&db.store.item_data(None, "sum").await.unwrap()).unwrap();
    assert_eq!(
        sum,
        json!({"total": FILES * (FILES - 1) / 2, "complete": FILES + 1})
    );
}

behaviour!(a_folder_spawns_its_files_and_their_fan_in);
/// One folder item answers 1,000 children at its gate and a fan-in at
/// gate 1: every child runs once, and the fan-in runs after the last one.
async fn a_folder_spawns_its_files_and_their_fan_in(db: TestDb) {
    folder(&db).await;
    let h = Handler::start_async(answer).await;
    let _p = Proc::start(&db, &h.url(), &[]);
    check_folder(&db, &h).await;
}

behaviour!(spawned_items_stay_exact_while_processors_die);
/// The folder's first delivery is held until its processor is killed;
/// another processor delivers the same step again and its children are
/// named the same; a second processor dies while the children run. The
/// items and the steps per child stay exact.
async fn spawned_items_stay_exact_while_processors_die(db: TestDb) {
    folder(&db).await;
    let (release, held) = tokio::sync::watch::channel(true);
    let h = Handler::start_async(move |c: Call| {
        let mut held = held.clone();
        async move {
            if c.item == "folder" && c.attempt == 1 && *held.borrow() {
                let _ = held.wait_for(|h| !*h).await;
            }
            if c.item != "folder" && c.item != "sum" {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            answer(c).await
        }
    })
    .await;
    let first = Proc::start(&db, &h.url(), &[]);
    wait_for(
        "the folder's first delivery",
        Duration::from_secs(30),
        || async { !h.calls_for("folder").is_empty() },
    )
    .await;
    drop(first);
    let _ = release.send(false);
    let second = Proc::start(&db, &h.url(), &[]);
    let _third = Proc::start(&db, &h.url(), &[]);
    wait_for("a third of the files", Duration::from_secs(60), || async {
        h.calls().len() as i64 > FILES / 3
    })
    .await;
    drop(second);
    let _fourth = Proc::start(&db, &h.url(), &[]);
    check_folder(&db, &h).await;
    let folder_calls = h.calls_for("folder");
    assert!(folder_calls.len() >= 2, "the folder's step ran again");
    let keys: HashSet<_> = folder_calls.iter().map(|c| &c.idempotency_key).collect();
    assert_eq!(keys.len(), 1, "as the same step");
}

behaviour!(an_answer_that_breaks_a_bound_fails_its_attempt);
/// Too many items, a child below the item's gate, a child whose id is
/// taken in its partition and an answer that both spawns and ends its partition each fail
/// the attempt, saying why, and add nothing.
async fn an_answer_that_breaks_a_bound_fails_its_attempt(db: TestDb) {
    // No item at gate 0: the partition's gate is 1 when they run.
    db.partition("b", false, false, "continue").await;
    db.items("b", 1, &["many", "low", "dup", "both"]).await;
    db.items("b", 5, &["taken"]).await;
    let h = Handler::start(|c| {
        let items = match c.item.as_str() {
            "many" => (0..10_001).map(|n| json!({"data": n})).collect(),
            "low" => vec![json!({"gate": 0, "data": 1})],
            "dup" => vec![json!({"data": 1}), json!({"id": "taken", "data": 2})],
            "both" => vec![json!({"data": 1})],
            _ => return crate::support::done(),
        };
        let mut body = json!({"items": items});
        if c.item == "both" {
            body["partition"] = json!("complete");
        }
        reply(200, body)
    })
    .await;
    let _p = Proc::start(&db, &h.url(), &["--max-attempts", "2"]);
    for id in ["many", "low", "dup", "both"] {
        db.wait_item(id, "failed").await;
    }
    db.assert_failed("many", 2, &["10001 items", "at most 10000"])
        .await;
    db.assert_failed("low", 2, &["gate 0, below the answering item's gate 1"])
        .await;
    db.assert_failed("dup", 2, &["already exists"]).await;
    db.assert_failed("both", 2, &["\"partition\" and \"items\""])
        .await;
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE parent_id IS NOT NULL")
            .await,
        0,
        "nothing was added"
    );
}
