//! Enqueue and the partition's state: a `cancelled` partition takes
//! nothing (409, a failing command, `Error::Conflict`), a `failed` one
//! takes the items and says they wait for a retry, after which they run.

use feed::store::{NewItem, PartitionSpec};
use reqwest::StatusCode;
use serde_json::json;

use crate::cli::processor;
use crate::enqueue_api::{enqueue, message, serve};
use crate::on_all_backends;
use crate::support::{Spawned, TestDb, done};

async fn items_in(db: &TestDb, partition: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = '{partition}'");
    db.count(&sql).await
}

on_all_backends!(a_cancelled_partition_takes_nothing);
async fn a_cancelled_partition_takes_nothing(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(crate::enqueue_api::PRODUCER)).await;
    let one = || vec![NewItem::new(b"1".to_vec())];
    let spec = PartitionSpec::default();
    db.store.enqueue("c", &spec, one()).await.unwrap();
    db.store.cancel("c").await.unwrap();

    let (code, e) = enqueue(&base, "c", "{\"id\": \"c-api\", \"data\": 2}").await;
    assert_eq!(code, StatusCode::CONFLICT, "{e}");
    assert!(message(&e).contains("partition c is cancelled"), "{e}");

    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "c"],
        "{\"id\": \"c-cli\", \"data\": 3}\n",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("partition c is cancelled"), "{err}");

    let e = db.store.enqueue("c", &spec, one()).await.unwrap_err();
    assert!(matches!(e, feed::Error::Conflict(_)), "{e}");

    assert_eq!(items_in(&db, "c").await, 1, "nothing was written");
    assert_eq!(db.partition_status("c").await, "cancelled");
}

on_all_backends!(a_failed_partition_takes_items_that_wait_for_a_retry);
async fn a_failed_partition_takes_items_that_wait_for_a_retry(db: TestDb) {
    let base = serve(db.store.clone(), None, Some(crate::enqueue_api::PRODUCER)).await;
    db.partition_of("f", true, false, "block", &["f-0"]).await;
    db.sql("UPDATE feed_items SET status = 'failed', last_error = 'boom' WHERE id = 'f-0'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'failed' WHERE id = 'f'")
        .await;

    let (code, a) = enqueue(&base, "f", "{\"id\": \"f-api\", \"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(
        (a["items"].clone(), a["failed"].clone()),
        (json!(1), json!(true)),
        "{a}"
    );
    let says = a["message"].as_str().unwrap_or_default();
    assert!(says.contains("is failed") && says.contains("retr"), "{a}");

    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "f"],
        "{\"id\": \"f-cli\", \"data\": 2}\n",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("partition f is failed") && out.contains("processor retry"),
        "{out}"
    );

    let items = vec![NewItem::new(b"3".to_vec()).with_id("f-lib")];
    let r = db
        .store
        .enqueue("f", &PartitionSpec::default(), items)
        .await
        .unwrap();
    assert!(r.failed && !r.reopened, "{r:?}");
    assert_eq!(db.partition_status("f").await, "failed", "it stays failed");

    // A healthy partition answers failed: false and no message.
    let (code, a) = enqueue(&base, "ok", "{\"data\": 1}").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    assert_eq!(a["failed"], json!(false), "{a}");
    assert!(a.get("message").is_none(), "{a}");

    // After the retry, the failed item and the new ones run.
    let scene = Spawned::start(&db, &[], |_| done()).await;
    db.wait_partition("ok", "complete").await;
    assert_eq!(db.partition_status("f").await, "failed");
    assert!(
        scene.0.calls().iter().all(|c| c.partition != "f"),
        "nothing of a failed partition runs"
    );
    db.store.retry_partition("f").await.unwrap();
    db.wait_partition("f", "complete").await;
    for id in ["f-0", "f-api", "f-cli", "f-lib"] {
        assert_eq!(scene.0.calls_for(id).len(), 1, "{id}");
    }
}
