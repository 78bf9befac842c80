//! Ids compared byte for byte on MariaDB too (the book: Security): its
//! default collation ignores case and trailing spaces, which made `case-1`
//! the same partition as `Case-1` (the item was answered `created: false`
//! and never ran), `"acme-1 "` the same as `acme-1`, and tenant `acme` the
//! owner of `ACME`'s partitions.

use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use serde_json::Value;

use crate::backend_tests;
use crate::cli::processor;
use crate::enqueue_api::{ADMIN, message, send, serve};
use crate::support::{InProcess, TestDb, done};

/// `processor tokens create` with `args`: the token it printed.
fn token(db: &TestDb, args: &[&str]) -> String {
    let mut all = vec!["tokens", "create", "--database-url", &db.url];
    all.extend_from_slice(args);
    let o = processor(&all, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Enqueues item `id` into `partition` (as written in a URL) with `token`.
async fn put(base: &str, token: &str, partition: &str, id: &str) -> (StatusCode, Value) {
    let path = format!("/api/v1/partitions/{partition}/items");
    let body = format!("{{\"id\": \"{id}\", \"data\": 1}}");
    send(base, &path, Some(token), None, body).await
}

backend_tests!(ids_differ_by_case_and_trailing_spaces: mariadb => Mysql);
/// Partitions and items whose ids differ only in case are distinct, each
/// created, and every item runs. An id ending in a space is refused at
/// the API (a header cannot carry it); written with SQL beside the one
/// without, it is a row of its own, and runs too.
async fn ids_differ_by_case_and_trailing_spaces(db: TestDb) {
    let base = serve(db.store.clone(), Some(ADMIN), None).await;
    for (partition, id) in [("Case-1", "Item-1"), ("case-1", "item-1"), ("acme-1", "i")] {
        let (code, a) = put(&base, ADMIN, partition, id).await;
        assert_eq!(code, StatusCode::OK, "{partition}: {a}");
        assert_eq!(a["created"], Value::Bool(true), "{partition}: {a}");
    }
    let (code, e) = put(&base, ADMIN, "acme-1%20", "j").await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{e}");
    assert!(message(&e).contains("starts or ends with a space"), "{e}");
    db.partition("acme-1 ", true, false, "block").await;
    db.item("i ", "acme-1 ", 0, serde_json::json!(2)).await;
    let ids: Vec<(String, String)> = db
        .rows(
            "SELECT partition_id, id FROM feed_items ORDER BY partition_id, id",
            &["partition_id", "id"],
        )
        .await;
    let want = [
        ("Case-1", "Item-1"),
        ("acme-1", "i"),
        ("acme-1 ", "i "),
        ("case-1", "item-1"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, i)| (p.to_string(), i.to_string()))
        .collect();
    assert_eq!(ids, want);
    let InProcess(h, _p) = InProcess::start(&db, |_| done()).await;
    db.wait_complete(4).await;
    for id in ["Item-1", "item-1"] {
        assert_eq!(h.calls_for(id).len(), 1, "{id:?} ran once");
    }
    // "i" and "i " (its header read without the space): one call each.
    assert_eq!(h.calls_for("i").len(), 2);
}

backend_tests!(scopes_hold_byte_for_byte: mariadb => Mysql);
/// A token of tenant `acme` with the prefix `acme-` cannot write into
/// `ACME-1`, and one of tenant `acme` cannot write into tenant `ACME`'s
/// partitions; `ACME`'s item ids are not `acme`'s.
async fn scopes_hold_byte_for_byte(db: TestDb) {
    let base = serve(db.store.clone(), Some(ADMIN), None).await;
    let prefixed = token(&db, &["--tenant", "acme", "--prefix", "acme-"]);
    let acme = token(&db, &["--tenant", "acme"]);
    let upper = token(&db, &["--tenant", "ACME"]);
    let (code, a) = put(&base, &upper, "shared", "ACME-item").await;
    assert_eq!(code, StatusCode::OK, "{a}");

    let (code, e) = put(&base, &prefixed, "ACME-1", "acme-x").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{e}");
    assert!(message(&e).contains("must start with"), "{e}");
    let (code, e) = put(&base, &acme, "shared", "acme-item").await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{e}");
    assert!(message(&e).contains("is not tenant \"acme\"'s"), "{e}");
    // Its own partition, an item id of ACME's but for case: a new item.
    let (code, a) = put(&base, &acme, "own", "acme-ITEM").await;
    assert_eq!(code, StatusCode::OK, "{a}");
    let (code, a) = put(&base, &acme, "own", "acme-item").await;
    assert_eq!(
        (code, &a["items"]),
        (StatusCode::OK, &Value::from(1)),
        "{a}"
    );
    let tenants: Vec<(String, Option<String>)> = db
        .rows(
            "SELECT id, tenant FROM feed_partitions ORDER BY id",
            &["id", "tenant"],
        )
        .await;
    let want = vec![
        ("own".to_string(), Some("acme".to_string())),
        ("shared".to_string(), Some("ACME".to_string())),
    ];
    assert_eq!(tenants, want);
    let n = db.count("SELECT COUNT(*) AS n FROM feed_items").await;
    assert_eq!(n, 3, "each item written once, the refused requests nothing");
}

/// Each id-like column's collation and nullability, and the foreign keys
/// of `feed_items.partition_id`.
async fn id_columns(db: &TestDb) -> (Vec<(String, String, String, String)>, i64) {
    let columns = db
        .rows(
            "SELECT TABLE_NAME AS t, COLUMN_NAME AS c, COLLATION_NAME AS k, IS_NULLABLE AS n \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND \
             ((TABLE_NAME IN ('feed_partitions', 'feed_items') AND COLUMN_NAME IN ('id', 'partition_id', 'tenant')) \
             OR (TABLE_NAME = 'feed_producer_tokens' AND COLUMN_NAME = 'prefix')) ORDER BY t, c",
            &["t", "c", "k", "n"],
        )
        .await;
    let keys = db
        .count(
            "SELECT COUNT(*) AS n FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'feed_items' \
             AND REFERENCED_TABLE_NAME = 'feed_partitions'",
        )
        .await;
    (columns, keys)
}

backend_tests!(binary_ids_up_and_down: mariadb => Mysql);
/// From the schema before it, with work: `up` makes the id columns
/// binary, keeping their nullability and the items' foreign key; `down`
/// gives them the table's collation back; the work stays.
async fn binary_ids_up_and_down(db: TestDb) {
    crate::migrations::down_before(&db, "m20261129_000018").await;
    db.partition_of("p", true, false, "block", &["a", "b"])
        .await;
    let (before, keys) = id_columns(&db).await;
    assert_eq!(keys, 1);
    assert!(
        before.iter().all(|c| c.2 != "utf8mb4_nopad_bin"),
        "{before:?}"
    );
    db.store.migrate().await.unwrap();
    let (after, keys) = id_columns(&db).await;
    assert_eq!(keys, 1, "the foreign key is there again");
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((&a.0, &a.1, &a.3), (&b.0, &b.1, &b.3), "nullability kept");
        assert_eq!(a.2, "utf8mb4_nopad_bin", "{a:?}");
    }
    let refused = db
        .store
        .connection()
        .execute_unprepared(
            "INSERT INTO feed_items (id, partition_id, data) VALUES ('c', 'P', x'31')",
        )
        .await;
    assert!(refused.is_err(), "the key holds, byte for byte");
    crate::migrations::down_before(&db, "m20261129_000018").await;
    assert_eq!(id_columns(&db).await, (before, 1));
    db.store.migrate().await.unwrap();
    assert_eq!(id_columns(&db).await, (after, 1));
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_items").await, 2);
}
