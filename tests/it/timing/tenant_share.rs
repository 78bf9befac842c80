//! Fairness across tenants, measured as when each tenant's last call
//! came: a share of the drain's wall-clock time, so the test takes the
//! machine to itself.

use crate::support::{Handler, Proc, TestDb, done};
use crate::tenants::{enqueue, of};
use crate::timing;

timing!(a_tenant_with_one_partition_is_not_behind_one_with_a_hundred);
/// Tenant a with 100 partitions of 100 items, tenant b with one partition
/// of 100, equal weights: b finishes within the first quarter of a's drain.
async fn a_tenant_with_one_partition_is_not_behind_one_with_a_hundred(db: TestDb) {
    for p in 0..100 {
        enqueue(&db, &format!("a-{p:03}"), 100, of("a")).await;
    }
    enqueue(&db, "b-0", 100, of("b")).await;
    let h = Handler::start(|_| done()).await;
    let _p = Proc::start(&db, &h.url(), &["--concurrency", "8"]);
    db.wait_complete(10_100).await;
    let calls = h.calls();
    let first = calls.iter().map(|c| c.at).min().unwrap();
    let a_end = calls
        .iter()
        .filter(|c| c.partition.starts_with("a-"))
        .map(|c| c.at)
        .max()
        .unwrap();
    let b_end = calls
        .iter()
        .filter(|c| c.partition.starts_with("b-"))
        .map(|c| c.at)
        .max()
        .unwrap();
    let share =
        b_end.duration_since(first).as_secs_f64() / a_end.duration_since(first).as_secs_f64();
    eprintln!("b finished at {:.1} % of a's drain", share * 100.0);
    assert!(
        share <= 0.25,
        "b finished at {:.0} % of a's drain",
        share * 100.0
    );
}
