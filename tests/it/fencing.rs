//! Exactly-once acknowledgement: a processor that lost a partition
//! mid-flight cannot write its late result.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

use crate::on_all_backends;
use crate::support::{Handler, Proc, TestDb, json as reply, metric, wait_for};

/// Processor A holding partition `p` (one item `x`) with its call hanging,
/// and a second processor B live: the scene of a lease moving mid-call.
/// Each one's calls are answered when its `release_*` is set.
pub struct TwoProcessors {
    pub handler: Handler,
    pub a: Proc,
    pub b: Proc,
    pub a_session: String,
    pub b_session: String,
    pub release_a: watch::Sender<bool>,
    pub release_b: watch::Sender<bool>,
}

pub async fn two_processors(db: &TestDb) -> TwoProcessors {
    db.partition("p", true, false, "block").await;
    db.item("x", "p", 0, json!({"v": 0})).await;
    let (release_a, rx_a) = watch::channel(false);
    let (release_b, rx_b) = watch::channel(false);
    let first: Arc<Mutex<Option<String>>> = Arc::default();
    let handler = Handler::start_async(move |c| {
        let (mut rx_a, mut rx_b, first) = (rx_a.clone(), rx_b.clone(), first.clone());
        async move {
            let is_a = first.lock().get_or_insert_with(|| c.processor.clone()) == &c.processor;
            let rx = if is_a { &mut rx_a } else { &mut rx_b };
            let _ = rx.wait_for(|go| *go).await;
            reply(200, json!({"done": true, "data": {"by": c.processor}}))
        }
    })
    .await;
    // A takes the partition and its call hangs.
    let a = Proc::start(db, &handler.url(), &[]);
    wait_for("A's call", Duration::from_secs(30), || async {
        handler.calls().len() == 1
    })
    .await;
    let a_session = handler.calls()[0].processor.clone();
    let b = Proc::start(db, &handler.url(), &[]);
    wait_for("B's session", Duration::from_secs(30), || async {
        db.sessions().await.len() == 2
    })
    .await;
    let b_session = db
        .sessions()
        .await
        .into_iter()
        .find(|s| *s != a_session)
        .unwrap();
    TwoProcessors {
        handler,
        a,
        b,
        a_session,
        b_session,
        release_a,
        release_b,
    }
}

on_all_backends!(late_result_after_lease_change_is_rejected);
async fn late_result_after_lease_change_is_rejected(db: TestDb) {
    let TwoProcessors {
        handler: h,
        a,
        b: _b,
        a_session: a_id,
        b_session: b_id,
        release_a,
        release_b,
    } = two_processors(&db).await;
    // The lease moves to B while A's call is in flight.
    let moved = db
        .exec(
            "UPDATE feed_partitions SET owner = ?, version = version + 1 WHERE id = 'p' AND owner = ?",
            vec![b_id.clone().into(), a_id.clone().into()],
        )
        .await;
    assert_eq!(moved, 1, "A held the partition");
    wait_for("B's call", Duration::from_secs(30), || async {
        h.calls().iter().any(|c| c.processor == b_id)
    })
    .await;

    // A answers late: its result is rejected and nothing changes.
    release_a.send(true).unwrap();
    wait_for("A's rejection", Duration::from_secs(30), || async {
        metric(&a.metrics().await, "feed_items_total{outcome=\"rejected\"}") >= 1.0
    })
    .await;
    let row = db.item_row("x").await;
    assert_eq!(
        (row.status.as_str(), row.version, row.data),
        ("available", 0, json!({"v": 0}))
    );

    // B answers: its result is the one stored, written once.
    release_b.send(true).unwrap();
    db.wait_partition("p", "complete").await;
    let row = db.item_row("x").await;
    assert_eq!(row.data, json!({"by": b_id}));
    assert_eq!(row.version, 1, "exactly one result was written");
    assert_eq!(
        metric(&a.metrics().await, "feed_items_total{outcome=\"done\"}"),
        0.0
    );
}
