//! The dashboard as a person uses it, in a real headless Chromium: log in,
//! watch a partition move through its gates while a processor runs, retry a
//! failed item, pause and resume, cancel, advance a manual checkpoint, and
//! see hostile item data as text. Screenshots go to target/screenshots/.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use feed::store::{NewItem, PartitionSpec};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::console_api::{TOKEN, enqueue};
use crate::support::{Backend, Handler, Proc, TestDb, done, json as reply};
use crate::webdriver::Browser;

const HOSTILE: &str = r#"<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"#;

/// Answers by partition: `flow` steps gate 0 → 1 → done when let through,
/// `fails`' first call fails for good, `doomed` never answers until the end.
async fn handler(flow: Arc<Semaphore>, doomed: Arc<Semaphore>) -> Handler {
    let failed_once = Arc::new(AtomicBool::new(false));
    Handler::start_async(move |c| {
        let (flow, doomed, failed_once) = (flow.clone(), doomed.clone(), failed_once.clone());
        async move {
            match c.partition.as_str() {
                "flow" => {
                    flow.acquire().await.unwrap().forget();
                    if c.gate == 0 {
                        reply(200, json!({ "gate": 1 }))
                    } else {
                        done()
                    }
                }
                "doomed" => {
                    doomed.acquire().await.unwrap().forget();
                    done()
                }
                "fails" if c.item == "x/1" && !failed_once.swap(true, Ordering::SeqCst) => {
                    let message = format!("{HOSTILE} boom");
                    reply(
                        500,
                        json!({ "error": { "message": message, "no_retry": true } }),
                    )
                }
                _ => done(),
            }
        }
    })
    .await
}

/// Clicks an action button in the page's action bar, then confirms it.
async fn act(b: &Browser, scope: &str, label: &str) {
    b.press(scope, label).await;
    b.wait_text("p.question", "?").await;
    b.screenshot(&format!(
        "confirm-{}",
        label.to_lowercase().replace(' ', "-")
    ))
    .await;
    b.click("#confirm").await;
    b.wait_text("p.flash", ".").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: cargo test --workspace --tests -- --ignored"]
async fn dashboard_drives_a_running_processor() {
    let Some(b) = Browser::start(true).await else {
        return;
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let (flow, doomed) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let h = handler(flow.clone(), doomed.clone()).await;
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), format!("{TOKEN}\n")).unwrap();
    enqueue(&db, "flow", false, &[("f/1", 0), ("f/2", 0), ("f/3", 0)]).await;
    enqueue(&db, "fails", false, &[("x/1", 0), ("x/2", 0)]).await;
    enqueue(&db, "doomed", false, &[("d/1", 0), ("d/2", 0)]).await;
    enqueue(&db, "manual", true, &[("m/1", 0), ("m/2", 1)]).await;
    let mut hold = PartitionSpec::default();
    hold.auto_close = false;
    db.store.enqueue("hold", &hold, vec![]).await.unwrap();
    let hostile = vec![
        NewItem::new(serde_json::to_vec(&json!({ "html": HOSTILE })).unwrap()).with_id("evil"),
    ];
    db.store.enqueue(HOSTILE, &hold, hostile).await.unwrap();
    let token_path = token_file.path().to_str().unwrap();
    let proc = Proc::start(
        &db,
        &h.url(),
        &[
            "--ui",
            "--admin-token-file",
            token_path,
            "--request-timeout",
            "300s",
        ],
    );
    let base = format!("http://{}", proc.listen.clone().unwrap());
    // The browser gets no second try at a port not yet listening (a busy
    // machine starts the processor slowly).
    crate::support::wait_for(
        "the processor to listen",
        std::time::Duration::from_secs(60),
        || async { !proc.metrics().await.is_empty() },
    )
    .await;
    crate::support::wait_console(&base).await;

    // Log in.
    b.goto(&format!("{base}/login")).await;
    b.screenshot("login").await;
    b.client
        .find(fantoccini::Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.click("#login").await;
    b.wait_text("nav .who", "Log out").await;
    b.wait_text("#count-processors", "1").await;
    b.screenshot("overview").await;

    // Watch `flow` move through its gates without reloading the page.
    b.goto(&format!("{base}/partitions/flow")).await;
    b.wait_text("tr[data-gate='0']", "0/3 complete").await;
    b.eval("(window.marker = 'same page')").await;
    flow.add_permits(3);
    b.wait_text("#gate", "1").await;
    b.wait_text("tr[data-gate='1']", "0/3 complete").await;
    b.screenshot("partition-progress").await;
    flow.add_permits(3);
    b.wait_text("#status", "complete").await;
    b.wait_text("tr[data-gate='1']", "3/3 complete").await;
    assert_eq!(
        b.eval("window.marker").await,
        json!("same page"),
        "the page reloaded"
    );

    // Retry a failed item from its page and watch it complete.
    db.wait_partition("fails", "failed").await;
    b.goto(&format!("{base}/partitions/fails")).await;
    b.wait_text("tr.item[data-id='x/1'] td.status", "failed")
        .await;
    b.wait_text(
        "tr.item[data-id='x/1'] td.error",
        "<script>window.pwned=1</script>",
    )
    .await;
    b.screenshot("partition-failed").await;
    act(&b, "tr.item[data-id='x/1']", "Retry").await;
    b.wait_text("#status", "complete").await;
    b.wait_text("tr.item[data-id='x/1'] td.status", "complete")
        .await;

    // Pause `hold`, add work, see none of it run; resume and see it finish.
    b.goto(&format!("{base}/partitions/hold")).await;
    act(&b, ".actions", "Pause").await;
    b.wait_text("#status", "paused").await;
    crate::support::wait_for(
        "hold leased",
        std::time::Duration::from_secs(60),
        || async { db.partition_row("hold").await.2.is_some() },
    )
    .await;
    enqueue(&db, "hold", false, &[("h/1", 0), ("h/2", 0)]).await;
    enqueue(&db, "later", false, &[("l/1", 0)]).await;
    db.wait_partition("later", "complete").await;
    assert!(
        h.calls().iter().all(|c| c.partition != "hold"),
        "a paused partition ran"
    );
    b.screenshot("partition-paused").await;
    act(&b, ".actions", "Resume").await;
    b.wait_text("tr[data-gate='0']", "2/2 complete").await;

    // Cancel `doomed` while its calls hang; they are rejected when they end.
    b.goto(&format!("{base}/partitions/doomed")).await;
    act(&b, ".actions", "Cancel").await;
    b.wait_text("#status", "cancelled").await;
    b.wait_text("tr.item[data-id='d/2'] td.status", "cancelled")
        .await;
    doomed.add_permits(10);
    b.screenshot("partition-cancelled").await;

    // Advance the manual checkpoint once gate 0 is done.
    crate::support::wait_for(
        "m/1 complete",
        std::time::Duration::from_secs(60),
        || async { db.item_row("m/1").await.status == "complete" },
    )
    .await;
    b.goto(&format!("{base}/partitions/manual")).await;
    b.wait_text("#gate", "0").await;
    act(&b, ".actions", "Advance gate").await;
    b.wait_text("#status", "complete").await;
    assert_eq!(db.partition_row("manual").await.1, 1);

    // Hostile data and ids are shown as text and never run.
    b.goto(&format!("{base}/partitions")).await;
    b.wait_text("main table", HOSTILE).await;
    b.screenshot("partitions").await;
    b.click_link(HOSTILE).await;
    b.wait_text("h1", HOSTILE).await;
    b.wait_text(
        "tr.item[data-id='evil'] td.data",
        "<script>window.pwned=1</script>",
    )
    .await;
    b.screenshot("partition-hostile").await;
    assert_eq!(b.eval("typeof window.pwned").await, json!("undefined"));

    b.goto(&format!("{base}/processors")).await;
    b.wait_text("main table", "partitions held").await;
    b.screenshot("processors").await;
    let page = b.client.source().await.unwrap();
    b.close().await;

    // The token never shows: not in pages, metrics or logs.
    assert!(!page.contains(TOKEN));
    assert!(!proc.metrics().await.contains(TOKEN));
    assert!(!proc.log().contains(TOKEN), "the token is in the log");
}

/// With scripts off the pages still render, read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow tier: cargo test --workspace --tests -- --ignored"]
async fn pages_render_without_javascript() {
    let Some(b) = Browser::start(false).await else {
        return;
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    enqueue(&db, "quiet", false, &[("q/1", 0), ("q/2", 1)]).await;
    let port = crate::support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut ui = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["ui", "--database-url", &db.url, "--listen", &listen])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://{listen}");
    crate::support::wait_for(
        "ui listening",
        std::time::Duration::from_secs(30),
        || async { reqwest::get(format!("{base}/")).await.is_ok() },
    )
    .await;
    b.goto(&format!("{base}/partitions/quiet")).await;
    b.wait_text("nav .who", "read-only").await;
    b.wait_text("tr[data-gate='1']", "0/1 complete").await;
    b.wait_text(".actions", "Read-only").await;
    assert!(
        b.client
            .find(fantoccini::Locator::Css("form.action"))
            .await
            .is_err()
    );
    b.screenshot("partition-no-javascript").await;
    // An event whose delivery gave up is counted on the overview.
    db.sql(
        "INSERT INTO feed_events (partition_id, kind, gate, status) \
         VALUES ('quiet', 'partition.gate', 1, 'failed')",
    )
    .await;
    b.goto(&format!("{base}/")).await;
    b.wait_text("#count-available", "1").await;
    b.wait_text("#count-events-failed", "1").await;
    // A processor whose dispatch holds off, holding the partition, and an
    // item of it waiting to retry: the overview and the partition's page
    // say why, and list the item with its last error.
    db.sql(
        "INSERT INTO feed_processors (id, hostname, pid, software_version, started_at, heartbeat_at, held_reason, held_since) \
         VALUES ('held-proc', 'h', 1, 'v', 0, 0, 'handler at http://127.0.0.1:9/feed: connection refused', 1)",
    )
    .await;
    db.sql("UPDATE feed_partitions SET owner = 'held-proc' WHERE id = 'quiet'")
        .await;
    db.sql("UPDATE feed_items SET attempts = 1, last_error = 'page 3 is blank' WHERE id = 'q/1'")
        .await;
    b.goto(&format!("{base}/")).await;
    b.wait_text(".banner.held", "Dispatch holds off").await;
    b.wait_text(".banner.held", "connection refused").await;
    b.goto(&format!("{base}/partitions/quiet")).await;
    b.wait_text(".banner.held", "http://127.0.0.1:9/feed").await;
    b.wait_text("#retrying", "Waiting to retry").await;
    b.wait_text("#retrying + table", "page 3 is blank").await;
    b.screenshot("partition-held-off").await;
    b.goto(&format!("{base}/login")).await;
    b.wait_text("main", "read-only").await;
    b.close().await;
    let _ = ui.kill();
    let _ = ui.wait();
}

/// Fills the Limits page's form (an empty value leaves its field empty),
/// submits it and answers the confirmation page's question.
async fn set_limits(b: &Browser, fields: [&str; 5], shot: Option<&str>) -> String {
    let ids = ["tenant", "max-in-flight", "rate", "burst", "weight"];
    for (id, value) in ids.iter().zip(fields) {
        b.fill(&format!("#limit-{id}"), value).await;
    }
    b.click("#limit-set").await;
    b.wait_text("p.question", "?").await;
    let question = b.text("p.question").await;
    if let Some(name) = shot {
        b.screenshot(name).await;
    }
    b.click("#confirm").await;
    b.wait_text("p.flash", "saved").await;
    question
}

crate::slow!(limits_page_sets_and_clears_a_tenant);
/// The Limits page as an operator uses it: log in from it, set a tenant's
/// limits with the form, change one of them, see a bad rate refused, clear
/// them; partitions show their tenant and processors their send rate.
async fn limits_page_sets_and_clears_a_tenant(db: TestDb) {
    let Some(b) = Browser::start(true).await else {
        return;
    };
    // Screenshots from one backend only: the three run at once.
    let shots = db.backend == Backend::Sqlite;
    let shot = |name: &'static str| shots.then_some(name);
    let mut spec = PartitionSpec::default();
    spec.tenant = Some("acme".into());
    let item = NewItem::new(b"{}".to_vec()).with_id("acme/1");
    db.store.enqueue("acme-1", &spec, vec![item]).await.unwrap();
    db.sql(
        "INSERT INTO feed_processors (id, hostname, send_rate) VALUES ('held-back', 'busy', 300)",
    )
    .await;
    let base = crate::console_api::serve(db.store.clone(), Some(TOKEN)).await;

    // Logged out, the page lists limits and offers to log in.
    b.goto(&format!("{base}/limits")).await;
    b.wait_text("main", "No tenant has limits").await;
    b.wait_text("main", "to change limits").await;
    assert!(
        b.client
            .find(fantoccini::Locator::Css("form.limits"))
            .await
            .is_err(),
        "a form for a logged-out viewer"
    );
    // The page's own link comes back here after the login.
    b.click("main a[href='/login?next=%2Flimits']").await;
    b.wait_text("h1", "Log in").await;
    b.fill("#token", TOKEN).await;
    b.click("#login").await;
    b.wait_text("nav .who", "Log out").await;
    b.wait_text("h1", "Limits").await;

    // Set every limit of a tenant through the form.
    let question = set_limits(
        &b,
        ["acme", "10", "100/s", "20", "3"],
        shot("limits-confirm"),
    )
    .await;
    assert_eq!(
        question,
        "Set the limits of tenant acme to: max in flight 10, rate 100/s, burst 20, weight 3?"
    );
    let row = "tr.limit[data-tenant='acme']";
    b.wait_text(&format!("{row} td.rate"), "100/s").await;
    assert_eq!(b.text(&format!("{row} td.max-in-flight")).await, "10");
    assert_eq!(b.text(&format!("{row} td.burst")).await, "20");
    assert_eq!(b.text(&format!("{row} td.weight")).await, "3");
    assert_eq!(
        crate::console_api::limit_rows(&db).await,
        [("acme".into(), Some(10), Some(100.0), Some(20), Some(3))]
    );
    if shots {
        b.screenshot("limits").await;
    }

    // Change the rate only: empty fields keep their values; none removes one.
    set_limits(&b, ["acme", "", "30/m", "none", ""], None).await;
    b.wait_text(&format!("{row} td.rate"), "30/m").await;
    assert_eq!(b.text(&format!("{row} td.max-in-flight")).await, "10");
    assert_eq!(b.text(&format!("{row} td.burst")).await, "-");
    assert_eq!(
        crate::console_api::limit_rows(&db).await,
        [("acme".into(), Some(10), Some(0.5), None, Some(3))]
    );

    // A rate that does not parse is refused, saying what to write.
    for (id, value) in [("tenant", "acme"), ("rate", "fast"), ("weight", "")] {
        b.fill(&format!("#limit-{id}"), value).await;
    }
    b.click("#limit-set").await;
    b.wait_text("p.flash.bad", "e.g. 500/s, 30/m or 1000/h")
        .await;
    if shots {
        b.screenshot("limits-bad-rate").await;
    }
    assert_eq!(
        crate::console_api::limit_rows(&db).await[0].2,
        Some(0.5),
        "a refused form changed the rate"
    );

    // The partition shows its tenant; the processor its send rate.
    b.goto(&format!("{base}/partitions")).await;
    b.wait_text("tr.partition[data-id='acme-1'] td.tenant", "acme")
        .await;
    b.goto(&format!("{base}/partitions/acme-1")).await;
    b.wait_text("#tenant", "acme").await;
    b.goto(&format!("{base}/processors")).await;
    b.wait_text(
        "tr.processor[data-id='held-back'] td.send-rate",
        "300/s (after 429s)",
    )
    .await;
    if shots {
        b.screenshot("processors-send-rate").await;
    }

    // Clear the tenant's limits from its row.
    b.goto(&format!("{base}/limits")).await;
    b.press(row, "Clear").await;
    b.wait_text("p.question", "Remove the limits of tenant acme?")
        .await;
    b.click("#confirm").await;
    b.wait_text("p.flash", "removed").await;
    b.wait_text("main", "No tenant has limits").await;
    assert!(crate::console_api::limit_rows(&db).await.is_empty());
    b.close().await;
}
