//! Sessions (docs/design.md): concurrent start-up, a lost session, graceful shutdown.

use std::time::Duration;

use serde_json::json;

use testkit::Scene;

use crate::support::{EmptyDb, Handler, Proc, Spawned, TestDb, done, wait_for};
use crate::{behaviour, on_all_backends};

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
    let Spawned(_h, p) = Spawned::start(&db, &[], |_| done()).await;
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
    let Spawned(h, mut p) = Spawned::start_async(&db, &[], |c| async move {
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

behaviour!(a_killed_nodes_partitions_move_when_its_session_expires);
/// Feed in process, sessions that expire after an hour: a node killed
/// holding a partition keeps it while the hour runs (its session is only
/// silent), and the other node takes it as soon as the database clock
/// has moved past the expiry, without anyone sleeping through it.
async fn a_killed_nodes_partitions_move_when_its_session_expires(db: TestDb) {
    const HOUR: Duration = Duration::from_secs(3600);
    db.partition_of("p", false, false, "block", &["a"]).await;
    let scene = Scene::new(&db.url, |_| done()).await;
    let config = || {
        let mut c = scene.config();
        c.leases.session_expiry = HOUR;
        c
    };
    let mut first = scene.node_with(config());
    db.wait_item("a", "complete").await;
    let holder = db.partition_row("p").await.2.expect("p is held");
    let _second = scene.node_with(config());
    wait_for("two sessions", Duration::from_secs(30), || async {
        db.sessions().await.len() == 2
    })
    .await;
    first.kill();
    db.item("b", "p", 0, json!({})).await;
    // Several acquire rounds of the second node: p stays with the silent one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(db.partition_row("p").await.2.as_ref(), Some(&holder));
    assert_eq!(db.item_row("b").await.status, "available");
    // An hour less a second later the killed node has been silent for an
    // hour and the live one (heartbeating) never looks dead.
    scene.clock.advance(HOUR - Duration::from_secs(1));
    db.wait_item("b", "complete").await;
    let owner = db.partition_row("p").await.2;
    assert!(owner.is_some() && owner != Some(holder), "{owner:?}");
    assert_eq!(scene.handler.calls_for("b").len(), 1);
}

behaviour!(an_answer_rejected_as_stale_is_sent_again_a_backoff_later);
/// The database clock jumps an hour while a call is in flight: until the
/// node's next heartbeat the database takes its session for dead and
/// rejects the answer as stale. The item is sent again a backoff later,
/// not at once in a loop (dozens of calls before), and completes.
async fn an_answer_rejected_as_stale_is_sent_again_a_backoff_later(db: TestDb) {
    db.partition_of("p", true, false, "block", &["a"]).await;
    let release = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let held = release.clone();
    let handler = Handler::start_async(move |_| {
        let held = held.clone();
        async move {
            let _ = held.acquire().await.map(|p| p.forget());
            done()
        }
    })
    .await;
    let scene = Scene::serving(&db.url, handler);
    let mut config = scene.config();
    config.leases.heartbeat_interval = Duration::from_secs(1);
    config.leases.session_expiry = Duration::from_secs(5);
    config.retries.backoff_base = Duration::from_secs(2);
    config.retries.backoff_max = Duration::from_secs(2);
    let _node = scene.node_with(config);
    wait_for("the call", Duration::from_secs(30), || async {
        !scene.handler.calls().is_empty()
    })
    .await;
    scene.clock.advance(Duration::from_secs(3600));
    release.add_permits(100);
    db.wait_item("a", "complete").await;
    let calls = scene.handler.calls_for("a").len();
    assert!((1..=3).contains(&calls), "{calls} calls");
}
