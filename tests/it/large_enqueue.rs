//! A large enqueue does not hold dispatch up: `processor enqueue` writes
//! in transactions of [`MAX_ENQUEUE_ITEMS`], and the handler keeps getting
//! calls while they go in; a failure midway says which lines to send again.

use std::time::Duration;

use feed::console::MAX_ENQUEUE_ITEMS;
use serde_json::json;

use crate::cli::processor;
use crate::slow;
use crate::support::{Spawned, TestDb, done, json as reply, wait_for};

/// Items of the large enqueue.
const ITEMS: usize = 20 * MAX_ENQUEUE_ITEMS;

slow!(dispatch_goes_on_during_a_large_enqueue);
async fn dispatch_goes_on_during_a_large_enqueue(db: TestDb) {
    // Items of `busy` never finish: each call is a new step, so the handler
    // is called for as long as dispatch goes on.
    db.partition_of("busy", true, false, "block", &["b1", "b2", "b3", "b4"])
        .await;
    let scene = Spawned::start(&db, &[], |c| {
        if c.partition == "busy" {
            reply(200, json!({"done": false}))
        } else {
            done()
        }
    })
    .await;
    let calls = || scene.0.ledger.lock().len();
    wait_for("dispatch under way", Duration::from_secs(30), || async {
        calls() > 20
    })
    .await;
    let input: String = (0..ITEMS).map(|i| format!("{{\"data\":{i}}}\n")).collect();
    let url = db.url.clone();
    let cli = tokio::task::spawn_blocking(move || {
        processor(
            &["enqueue", "--database-url", &url, "--partition", "bulk"],
            &input,
        )
    });
    // (items of `bulk` written, handler calls so far), while the enqueue runs.
    let mut samples = Vec::new();
    while !cli.is_finished() {
        let written = db
            .count("SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = 'bulk'")
            .await as usize;
        samples.push((written, calls()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let o = cli.await.unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains(&format!("{ITEMS} items enqueued")), "{out}");
    let midway: Vec<_> = samples
        .iter()
        .filter(|(written, _)| *written > 0 && *written < ITEMS)
        .collect();
    assert!(
        midway.len() >= 2,
        "the items went in in several transactions, seen part-written: {samples:?}"
    );
    let (first, last) = (midway[0], midway[midway.len() - 1]);
    println!("{} samples midway: {first:?} to {last:?}", midway.len());
    assert!(
        last.0 > first.0 && last.1 > first.1,
        "the handler was called while the enqueue went on ({first:?} to {last:?}): {samples:?}"
    );
}
