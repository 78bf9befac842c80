//! Bulk actions in the console, as an operator uses them in a real
//! headless Chromium: filter the partitions, pick an action for every
//! one the filter matches, see the count and confirm, find the action in
//! the audit with the login that did it; a filter that matches nothing
//! says so and asks nothing.

use feed::store::{NewItem, PartitionSpec};

use crate::console_api::TOKEN;
use crate::support::{Backend, TestDb};
use crate::webdriver::Browser;

crate::slow!(bulk_retry_from_the_console_is_counted_confirmed_and_audited);
/// 30 failed partitions: 20 of tenant acme, 10 of tenant other. Retry
/// from the list filtered to acme's failed ones: the question counts 20,
/// the 20 are open again with their items available, the other 10 stay
/// failed, and the audit's newest row says who, what and how many.
async fn bulk_retry_from_the_console_is_counted_confirmed_and_audited(db: TestDb) {
    let Some(b) = Browser::start(true).await else {
        return;
    };
    // Screenshots from one backend only: the three run at once.
    let shots = db.backend == Backend::Sqlite;
    for i in 0..30 {
        let mut spec = PartitionSpec::default();
        spec.tenant = Some(if i < 20 { "acme" } else { "other" }.into());
        let item = NewItem::new(b"{}".to_vec()).with_id("only");
        db.store
            .enqueue(&format!("p{i:02}"), &spec, vec![item])
            .await
            .unwrap();
    }
    db.sql("UPDATE feed_items SET status = 'failed', attempts = 5, last_error = 'boom'")
        .await;
    db.sql("UPDATE feed_partitions SET status = 'failed'").await;
    let base = crate::console_api::serve(db.store.clone(), Some(TOKEN)).await;

    b.goto(&format!(
        "{base}/login?next=%2Fpartitions%3Fstatus%3Dfailed%26tenant%3Dacme"
    ))
    .await;
    b.fill("#token", TOKEN).await;
    b.click("#login").await;
    b.wait_text("nav .who", "Log out").await;
    b.wait_text("h1", "Partitions").await;
    b.click("#bulk button").await;
    b.wait_text("p.question", "Retry the failed items of every partition matching status=failed, tenant=acme: 20 partitions?").await;
    if shots {
        b.screenshot("bulk-confirm").await;
    }
    b.click("#confirm").await;
    b.wait_text("h1", "Audit").await;
    b.wait_text("p.flash", "The bulk action ran").await;
    assert_eq!(
        b.text("#audit tbody tr:first-child td.action").await,
        "retry"
    );
    assert_eq!(b.text("#audit tbody tr:first-child td.matched").await, "20");
    assert_eq!(b.text("#audit tbody tr:first-child td.changed").await, "20");
    let actor = b.text("#audit tbody tr:first-child td.actor").await;
    assert!(
        actor.starts_with("console login ") && actor.len() == 22,
        "{actor}"
    );
    if shots {
        b.screenshot("audit").await;
    }
    let open = db
        .count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'available' AND tenant = 'acme'")
        .await;
    let failed = db
        .count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'failed' AND tenant = 'other'")
        .await;
    let items = db
        .count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'available'")
        .await;
    assert_eq!((open, failed, items), (20, 10, 20));
    // The API's audit holds the same record.
    let audit = reqwest::Client::new()
        .get(format!("{base}/api/v1/audit"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let audit: serde_json::Value = serde_json::from_str(&audit.text().await.unwrap()).unwrap();
    assert_eq!(audit[0]["actor"], serde_json::json!(actor), "{audit}");
    assert_eq!(
        audit[0]["filter"],
        serde_json::json!("status=failed, tenant=acme")
    );

    // A filter that matches nothing asks nothing.
    b.goto(&format!("{base}/partitions?tenant=nobody")).await;
    b.click("#bulk button").await;
    b.wait_text("main", "no partition matches tenant=nobody; nothing to do.")
        .await;
    assert!(
        b.client
            .find(fantoccini::Locator::Css("#confirm"))
            .await
            .is_err()
    );
    b.close().await;
}
