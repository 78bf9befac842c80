//! Sessions (docs/design.md): concurrent start-up, a lost session, graceful shutdown.

use std::time::Duration;

use serde_json::json;

use crate::on_all_backends;
use crate::support::{EmptyDb, Handler, Proc, Scene, TestDb, done, wait_for};

on_all_backends!(three_processors_start_on_empty_database);
/// Three processors started at the same moment on an empty database all
/// come up (the migrations race) and share the work.
async fn three_processors_start_on_empty_database(EmptyDb(db): EmptyDb) {
    let h = Handler::start(|_| done()).await;
    let procs: Vec<Proc> = (0..3).map(|_| Proc::start(&db, &h.url(), &[])).collect();
    wait_for("three sessions", Duration::from_secs(30), || async {
        db.store.migrate().await.is_ok() && db.sessions().await.len() == 3
    })
    .await;
    for p in 0..6 {
        db.partition(&format!("p{p}"), true, false, "block").await;
        db.item(&format!("i{p}"), &format!("p{p}"), 0, json!({}))
            .await;
    }
    wait_for(
        "every partition complete",
        Duration::from_secs(30),
        || async {
            let mut all = true;
            for p in 0..6 {
                all &= db.partition_status(&format!("p{p}")).await == "complete";
            }
            all
        },
    )
    .await;
    // Delivery is at least once: a partition stolen to rebalance while its
    // call was in flight is delivered again (and only one result is written).
    for p in 0..6 {
        assert!(!h.calls_for(&format!("i{p}")).is_empty());
        assert_eq!(db.item_row(&format!("i{p}")).await.version, 1);
    }
    for mut p in procs {
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "a processor exited:\n{}",
            p.log()
        );
        assert!(p.terminate().success());
    }
}

on_all_backends!(lost_session_is_replaced);
/// Deleting a processor's session row (as another processor does for a
/// dead session) makes it drop its leases, register anew and go on.
async fn lost_session_is_replaced(db: TestDb) {
    db.partition_of("p", false, false, "block", &["a"]).await;
    let Scene(_h, p) = Scene::start(&db, &[], |_| done()).await;
    db.wait_item("a", "complete").await;
    let old = db.sessions().await;
    assert_eq!(old.len(), 1);
    db.sql("DELETE FROM feed_processors").await;
    wait_for(
        "a new session owns the partition",
        Duration::from_secs(30),
        || async {
            let now = db.sessions().await;
            let owner = db.partition_row("p").await.2;
            now.len() == 1 && now != old && owner.as_ref() == now.first()
        },
    )
    .await;
    db.item("b", "p", 0, json!({})).await;
    db.wait_item("b", "complete").await;
    assert!(crate::support::metric(&p.metrics().await, "feed_sessions_lost_total") >= 1.0);
}

on_all_backends!(sigterm_hands_over);
/// SIGTERM: in-flight calls finish and are written, partitions are
/// released, the session row is deleted, exit code 0.
async fn sigterm_hands_over(db: TestDb) {
    db.partition_of("p", true, false, "block", &["slow"]).await;
    db.item("next", "p", 1, json!({})).await;
    let Scene(h, mut p) = Scene::start_async(&db, &[], |c| async move {
        if c.item == "slow" {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        done()
    })
    .await;
    wait_for("slow call", Duration::from_secs(30), || async {
        !h.calls().is_empty()
    })
    .await;
    let status = p.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        db.item_row("slow").await.status,
        "complete",
        "the in-flight result was written"
    );
    let (st, gate, owner) = db.partition_row("p").await;
    assert_eq!(st, "available");
    assert_eq!(owner, None, "partition released");
    assert!(gate <= 1);
    assert!(db.sessions().await.is_empty(), "session row deleted");
    assert!(
        h.calls_for("next").is_empty(),
        "no new work after the signal"
    );
    // Another processor takes over and finishes.
    let _q = Proc::start(&db, &h.url(), &[]);
    db.wait_partition("p", "complete").await;
}
