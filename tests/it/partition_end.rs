//! A handler's answer ends its partition: `"partition": "complete"`,
//! `"cancel"` or `"fail"`, with a `"reason"`. The rest of the partition is
//! cancelled, in one transaction with the answer, and the completion event
//! is written as for any other end.

use serde_json::json;

use crate::on_all_backends;
use crate::support::{Spawned, TestDb, done, json as reply, wait_for};

/// The folder `f`: the item `a` finds it empty; `b` and `c` at gate 0 and
/// `z` at gate 1 never need to run. One call at a time, `a` first (items
/// run in the order they were written); the others' answers take longer
/// than the test.
async fn ends(db: &TestDb, word: &str, partition: &str, item: &str) {
    db.partition("f", true, false, "block").await;
    db.items("f", 0, &["a", "b", "c"]).await;
    db.items("f", 1, &["z"]).await;
    let word = word.to_string();
    let scene = Spawned::start_async(db, &["--concurrency", "1"], move |call| {
        let word = word.clone();
        async move {
            if call.item == "a" {
                return reply(
                    200,
                    json!({"partition": word, "reason": "the folder is empty"}),
                );
            }
            // Still in flight when `a`'s answer ends the partition: its
            // answer, whenever it comes, is refused as stale.
            tokio::time::sleep(std::time::Duration::from_secs(20)).await;
            done()
        }
    })
    .await;
    db.wait_partition("f", partition).await;
    let Spawned(handler, _proc) = &scene;
    let a = db.item_row("a").await;
    assert_eq!(a.status, item, "{a:?}");
    let says = a.last_error.unwrap_or_default();
    assert!(
        says.contains("the handler ended its partition") && says.contains("the folder is empty"),
        "{says}"
    );
    for id in ["b", "c", "z"] {
        assert_eq!(db.item_row(id).await.status, "cancelled", "{id}");
    }
    assert!(
        !handler.calls().iter().any(|c| c.item == "z"),
        "gate 1 never ran"
    );
    let kind = format!("partition.{partition}");
    wait_for(
        "the completion event",
        std::time::Duration::from_secs(10),
        || async {
            db.count(&format!(
                "SELECT COUNT(*) AS n FROM feed_events WHERE partition_id = 'f' AND kind = '{kind}'"
            ))
            .await
                == 1
        },
    )
    .await;
}

on_all_backends!(an_answer_completes_its_partition);
/// `"complete"`: the partition is complete, the answering item too.
async fn an_answer_completes_its_partition(db: TestDb) {
    ends(&db, "complete", "complete", "complete").await;
}

on_all_backends!(an_answer_cancels_its_partition);
/// `"cancel"`: the partition is cancelled, the answering item complete.
async fn an_answer_cancels_its_partition(db: TestDb) {
    ends(&db, "cancel", "cancelled", "complete").await;
}

on_all_backends!(an_answer_fails_its_partition);
/// `"fail"`: the partition and the answering item are failed.
async fn an_answer_fails_its_partition(db: TestDb) {
    ends(&db, "fail", "failed", "failed").await;
}
