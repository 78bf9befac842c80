//! A gate check cut off by `--statement-timeout` (1 s here): a bound that
//! measures the machine as well as Feed, so the test takes the machine to
//! itself.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectionTrait, TransactionTrait};
use tokio::sync::Semaphore;

use crate::on_network_backends;
use crate::scale::{many_partitions, strip_ansi};
use crate::support::{Backend, Spawned, TestDb, done, metric, tail, wait_for, waited};

on_network_backends!(slow alone a_failed_check_is_checked_again);
/// 600 one-item partitions, more than one check reads at once. While the
/// test holds a share lock on one partition's row (result writes share it;
/// a close cannot), the check whose close includes that partition fails on
/// the statement timeout: its partitions stay marked and are checked again
/// until the lock is gone, and then every partition closes, every item run
/// once.
async fn a_failed_check_is_checked_again(db: TestDb) {
    many_partitions(&db, "k", 600, true, true).await;
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let Spawned(handler, processor) = Spawned::start_async(
        &db,
        &["--statement-timeout", "1s", "--concurrency", "8"],
        move |_| {
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                done()
            }
        },
    )
    .await;
    // Every partition leased, and no call answered yet: no check can have
    // closed anything.
    let owned = "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner IS NOT NULL";
    wait_for(
        "every partition leased",
        Duration::from_secs(60),
        || async { db.count(owned).await == 600 },
    )
    .await;
    let txn = db.store.connection().begin().await.unwrap();
    let share = if db.backend == Backend::Postgres {
        "FOR SHARE"
    } else {
        "LOCK IN SHARE MODE"
    };
    txn.execute_raw(testkit::statement(
        db.store.driver(),
        &format!("SELECT id FROM feed_partitions WHERE id = 'k0' {share}"),
        vec![],
    ))
    .await
    .unwrap();
    gate.add_permits(1_000);
    let failed = waited(Duration::from_secs(60), || async {
        strip_ansi(&processor.log()).contains("gate check failed")
    })
    .await;
    assert!(
        failed,
        "no gate check failed within 60 s; the processor's log ends:\n{}",
        tail(&strip_ansi(&processor.log()), 40)
    );
    let closed = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    assert!(
        db.count(closed).await < 600,
        "the locked partition cannot have closed"
    );
    txn.commit().await.unwrap();
    let open = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status <> 'complete'";
    let complete = waited(Duration::from_secs(300), || async {
        db.count(open).await == 0
    })
    .await;
    assert!(
        complete,
        "{} partitions still open 300 s after the lock was let go; the processor's log ends:\n{}",
        db.count(open).await,
        tail(&strip_ansi(&processor.log()), 40)
    );
    let calls = handler.calls();
    let items: HashSet<&str> = calls.iter().map(|c| c.item.as_str()).collect();
    assert_eq!(calls.len(), 600, "every item called once");
    assert_eq!(items.len(), 600, "every item called");
    let metrics = processor.metrics().await;
    assert!(metric(&metrics, "feed_statement_timeouts_total") >= 1.0);
}
