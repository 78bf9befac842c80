//! Rows written with plain SQL that Feed cannot read (the book: Producing
//! work with SQL): SQLite keeps text in an INTEGER column and a BLOB in a
//! text one. Such a row costs only itself; the rest of the work runs, and
//! `/readyz` says when polling for items keeps failing. PostgreSQL and
//! MariaDB refuse these values in the columns' types, so SQLite only.

use std::time::Duration;

use sea_orm::ConnectionTrait;

use crate::backend_tests;
use crate::cli::processor;
use crate::support::{InProcess, TestDb, done, wait_for};

/// An item's status and last error, read without decoding its other
/// columns (its `attempts` may be text).
async fn state(db: &TestDb, id: &str) -> (String, Option<String>) {
    let rows: Vec<(String, Option<String>)> = db
        .rows(
            &format!("SELECT status, last_error FROM feed_items WHERE id = '{id}'"),
            &["status", "last_error"],
        )
        .await;
    rows.into_iter().next().expect("the item is there")
}

backend_tests!(a_row_feed_cannot_read_costs_only_itself: sqlite => Sqlite);
/// An item with a BLOB `traceparent`, one with `attempts = 'many'` and
/// one whose gate is text, written first, beside good items in the same partition and another:
/// every good item completes, the BLOB traceparent is ignored (its item
/// runs), and the items whose attempts or gate cannot be read fail with a
/// message that says what to do, without a call.
async fn a_row_feed_cannot_read_costs_only_itself(db: TestDb) {
    db.partition("bad", true, false, "continue").await;
    db.partition("good", true, false, "block").await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, data, traceparent) \
         VALUES ('blob-tp', 'bad', x'7b7d', x'00ff')",
    )
    .await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, data, attempts) \
         VALUES ('many', 'bad', x'7b7d', 'many')",
    )
    .await;
    db.sql(
        "INSERT INTO feed_items (id, partition_id, data, gate) \
         VALUES ('bad-gate', 'bad', x'7b7d', 'later')",
    )
    .await;
    db.items("bad", 0, &["bad-ok-1", "bad-ok-2"]).await;
    db.items("good", 0, &["good-1", "good-2", "good-3"]).await;
    let InProcess(h, p) = InProcess::start(&db, |_| done()).await;
    db.wait_partition("good", "complete").await;
    db.wait_partition("bad", "complete").await;
    for id in [
        "blob-tp", "bad-ok-1", "bad-ok-2", "good-1", "good-2", "good-3",
    ] {
        assert_eq!(state(&db, id).await.0, "complete", "{id}");
        assert_eq!(h.calls_for(id).len(), 1, "{id} was called once");
    }
    let (status, error) = state(&db, "many").await;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(
        error.contains("the row cannot be read: attempts is 'many', not an integer")
            && error.contains("processor retry"),
        "{error}"
    );
    let (status, error) = state(&db, "bad-gate").await;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(
        error.contains("the row cannot be read: gate is a text value, not an integer"),
        "{error}"
    );
    assert!(
        h.calls_for("many").is_empty() && h.calls_for("bad-gate").is_empty(),
        "an unreadable item is never sent"
    );
    // `status` and `export` still read the partition, the failed item too.
    let o = processor(&["status", "--database-url", &db.url, "--json"], "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("attempts is 'many'"), "{out}");
    let args = ["export", "--database-url", &db.url, "--partition", "bad"];
    let o = processor(&args, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 5);
    let log = p.log();
    assert!(
        log.contains("traceparent is not text") && log.contains("blob-tp"),
        "the ignored traceparent is logged with its item:\n{log}"
    );
    assert!(
        !log.contains("polling for items failed"),
        "polling never failed:\n{log}"
    );
}

backend_tests!(readiness_says_when_polling_fails: sqlite => Sqlite);
/// With a column of `feed_items` renamed, every read of ready items fails:
/// `/readyz` answers 503 and names the failure; once the column is back,
/// the item runs and `/readyz` answers 200 again.
async fn readiness_says_when_polling_fails(db: TestDb) {
    db.partition_of("p", false, false, "block", &["first"])
        .await;
    let InProcess(h, p) = InProcess::start(&db, |_| done()).await;
    db.wait_item("first", "complete").await;
    let ready = format!("http://{}/readyz", p.listen.as_deref().unwrap());
    let answer = |url: String| async move {
        let r = reqwest::get(&url).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(answer(ready.clone()).await.0, 200);
    db.sql("ALTER TABLE feed_items RENAME COLUMN traceparent TO traceparent_gone")
        .await;
    db.items("p", 0, &["second"]).await;
    wait_for(
        "/readyz to report the failed polls",
        Duration::from_secs(30),
        || async {
            let (code, body) = answer(ready.clone()).await;
            code == 503 && body.contains("\"polling\":\"polling for items failed")
        },
    )
    .await;
    assert!(h.calls_for("second").is_empty());
    // The way back. A connection of the test's pool may still hold the
    // schema of before the rename and refuse it ("no such column"): each
    // try reads the schema first, on whichever connection it gets.
    wait_for("the column to be back", Duration::from_secs(30), || async {
        let c = db.store.connection();
        let _ = c
            .execute_unprepared("SELECT name FROM pragma_table_info('feed_items')")
            .await;
        c.execute_unprepared("ALTER TABLE feed_items RENAME COLUMN traceparent_gone TO traceparent")
            .await
            .is_ok()
    })
    .await;
    db.wait_item("second", "complete").await;
    wait_for(
        "/readyz to be ready again",
        Duration::from_secs(30),
        || async { answer(ready.clone()).await.0 == 200 },
    )
    .await;
}
