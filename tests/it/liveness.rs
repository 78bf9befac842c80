//! Liveness: whatever happens, every partition with runnable work is
//! eventually worked on (failed statements, changes made by hand, capped
//! processors, producers inserting with plain SQL).

use std::time::Duration;

use serde_json::json;

use crate::cli::processor;
use crate::on_all_backends;
use crate::support::{
    Handler, InProcess, Proc, Spawned, TestDb, done, json as reply, no_retry, retry_after, wait_for,
};

on_all_backends!(failed_gate_check_is_retried);
/// The database refuses every gate advance for a while (a fault injected
/// with a trigger): the check fails, the partition keeps its mark, and once
/// the fault is gone it advances and closes.
async fn failed_gate_check_is_retried(db: TestDb) {
    db.partition_of("p", true, false, "block", &["a"]).await;
    db.item("b", "p", 1, json!({})).await;
    db.refuse("no_advance", "feed_partitions", "NEW.gate <> OLD.gate")
        .await;
    let Spawned(_h, p) = Spawned::start(&db, &[], |_| done()).await;
    wait_for("a failed gate check", Duration::from_secs(30), || async {
        p.log().contains("gate check failed")
    })
    .await;
    assert_eq!(db.item_row("a").await.status, "complete");
    assert_eq!(db.partition_row("p").await.1, 0, "the fault held the gate");
    db.allow("no_advance", "feed_partitions").await;
    db.wait_partition("p", "complete").await;
    assert_eq!(db.item_row("b").await.status, "complete");
}

on_all_backends!(changes_by_hand_are_noticed);
/// Items deleted or completed by hand while the partition waits on them:
/// the processor notices within an acquire cycle and the partition moves on.
async fn changes_by_hand_are_noticed(db: TestDb) {
    for p in ["deleted", "completed"] {
        db.partition(p, true, false, "block").await;
        db.item(&format!("{p}-0"), p, 0, json!({})).await;
        db.item(&format!("{p}-1"), p, 1, json!({})).await;
    }
    // Gate-0 items are answered "later" (a long Retry-After), so they wait.
    let InProcess(h, _p) = InProcess::start(&db, |c| {
        if c.gate == 0 {
            retry_after(503, "3600", "later")
        } else {
            done()
        }
    })
    .await;
    wait_for("both gate-0 calls", Duration::from_secs(30), || async {
        h.calls().iter().filter(|c| c.gate == 0).count() >= 2
    })
    .await;
    wait_for("the retries stored", Duration::from_secs(30), || async {
        db.item_row("deleted-0").await.attempts == 1
            && db.item_row("completed-0").await.attempts == 1
    })
    .await;
    db.sql("DELETE FROM feed_items WHERE id = 'deleted-0'")
        .await;
    db.sql("UPDATE feed_items SET status = 'complete' WHERE id = 'completed-0'")
        .await;
    db.wait_partition("deleted", "complete").await;
    db.wait_partition("completed", "complete").await;
    assert_eq!(db.item_row("deleted-1").await.status, "complete");
    assert_eq!(db.item_row("completed-1").await.status, "complete");
}

on_all_backends!(plain_insert_into_complete_partition_reopens_it);
/// A producer adds an item to a complete partition with a plain INSERT
/// (not reopening it): a processor reopens the partition and runs the item.
async fn plain_insert_into_complete_partition_reopens_it(db: TestDb) {
    db.partition_of("p", true, false, "block", &["first"]).await;
    let InProcess(h, _p) = InProcess::start(&db, |_| done()).await;
    db.wait_partition("p", "complete").await;
    db.item("late", "p", 0, json!({})).await;
    db.wait_item("late", "complete").await;
    db.wait_partition("p", "complete").await;
    assert_eq!(h.calls_for("late").len(), 1);
}

on_all_backends!(capped_share_is_taken_up);
/// Ten partitions, one processor capped at 2 and one uncapped: the
/// uncapped one takes up the capped one's unused share and all complete.
async fn capped_share_is_taken_up(db: TestDb) {
    for p in 0..10 {
        db.partition(&format!("p{p}"), true, false, "block").await;
        for i in 0..3 {
            db.item(&format!("p{p}-{i}"), &format!("p{p}"), 0, json!({}))
                .await;
        }
    }
    // Hold the work still (503, retried without limit) until every
    // partition is leased, so that the shares are what is tested.
    let go = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let g = go.clone();
    let h = Handler::start(move |c| {
        if g.load(std::sync::atomic::Ordering::SeqCst) {
            reply(200, json!({"done": true, "data": {"by": c.processor}}))
        } else {
            retry_after(503, "1", "wait")
        }
    })
    .await;
    let capped = Proc::start(
        &db,
        &h.url(),
        &["--max-partitions", "2", "--max-attempts", "0"],
    );
    let free = Proc::start(&db, &h.url(), &["--max-attempts", "0"]);
    wait_for(
        "every partition leased",
        Duration::from_secs(30),
        || async {
            let owned = db
                .query(
                    "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner IS NOT NULL",
                    vec![],
                )
                .await[0]
                .try_get::<i64>("", "n")
                .unwrap();
            owned == 10
        },
    )
    .await;
    go.store(true, std::sync::atomic::Ordering::SeqCst);
    for p in 0..10 {
        db.wait_partition(&format!("p{p}"), "complete").await;
    }
    drop((capped, free));
}

on_all_backends!(capped_processor_makes_room);
/// A processor capped at 2 holds two idle partitions; a third partition
/// gets work: the capped processor gives an idle one back and runs it.
async fn capped_processor_makes_room(db: TestDb) {
    db.partition("idle1", false, false, "block").await;
    db.partition("idle2", false, false, "block").await;
    let Spawned(h, _p) = Spawned::start(&db, &["--max-partitions", "2"], |_| done()).await;
    wait_for(
        "both idle partitions held",
        Duration::from_secs(30),
        || async {
            db.partition_row("idle1").await.2.is_some()
                && db.partition_row("idle2").await.2.is_some()
        },
    )
    .await;
    db.partition_of("busy", true, false, "block", &["job"])
        .await;
    db.wait_partition("busy", "complete").await;
    assert_eq!(h.calls_for("job").len(), 1);
}

on_all_backends!(retry_after_the_gate_moved_on_runs_at_the_current_gate);
/// In an `on_failure = continue` partition an item failed at gate 0 while
/// the partition went on to gate 1 and closed. `processor retry` runs it
/// again at gate 1 and says so.
async fn retry_after_the_gate_moved_on_runs_at_the_current_gate(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["x", "y"])
        .await;
    let InProcess(h, _p) = InProcess::start(&db, |c| match (c.item.as_str(), c.gate) {
        ("x", 0) => no_retry(200, "bad"),
        ("y", 0) => reply(200, json!({"gate": 1})),
        _ => done(),
    })
    .await;
    db.wait_partition("p", "complete").await;
    assert_eq!(db.partition_row("p").await.1, 1);
    assert_eq!(db.item_row("x").await.status, "failed");
    let out = processor(
        &["retry", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 failed item back to available"), "{text}");
    assert!(
        text.contains("moved up to their partition's current gate"),
        "{text}"
    );
    db.wait_item("x", "complete").await;
    let x = db.item_row("x").await;
    assert_eq!(x.gate, 1);
    assert!(h.calls_for("x").iter().any(|c| c.gate == 1));
    db.wait_partition("p", "complete").await;
}
