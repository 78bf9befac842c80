//! Items held back by their tenant's rate show it as queue wait: 30 items
//! of one tenant written at once, sent at 10 a second with a burst of 1,
//! each waits about its place in line over the rate. The mean of
//! `feed_queue_wait_seconds` (its sum over its count) is within 20 % of
//! the mean wait the rate implies, and its median lies in the histogram's
//! bucket that holds the implied median.

use std::time::Duration;

use feed::store::NewItem;

use crate::controls::cli;
use crate::support::{Handler, Proc, TestDb, done, metric};
use crate::tenants::of;
use crate::timing;

const ITEMS: usize = 30;
const RATE: f64 = 10.0;

timing!(a_tenants_rate_shows_as_queue_wait);
async fn a_tenants_rate_shows_as_queue_wait(db: TestDb) {
    let (ok, out) = cli(
        &db,
        &[
            "limits", "set", "--tenant", "slow", "--rate", "10/s", "--burst", "1",
        ],
    );
    assert!(ok, "{out}");
    let h = Handler::start(|_| done()).await;
    let p = Proc::start(&db, &h.url(), &[]);
    crate::support::wait_for("a session", Duration::from_secs(30), || async {
        db.sessions().await.len() == 1
    })
    .await;
    let items = (0..ITEMS).map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("i{i:02}")));
    db.store
        .enqueue("p", &of("slow"), items.collect())
        .await
        .unwrap();
    db.wait_complete(ITEMS as i64).await;
    let text = p.metrics().await;
    let series = |s: &str| metric(&text, &format!("feed_queue_wait_seconds_{s}"));
    let count = series("count{tenant=\"slow\"}");
    let sum = series("sum{tenant=\"slow\"}");
    assert_eq!(count, ITEMS as f64, "{text}");
    // Item k goes at k / RATE after the first: the mean wait is the
    // mean of 0, 1/RATE, …, (ITEMS - 1)/RATE.
    let implied_mean = (ITEMS - 1) as f64 / 2.0 / RATE;
    let mean = sum / count;
    eprintln!("queue wait at {RATE}/s: mean {mean:.3} s, implied {implied_mean:.3} s");
    assert!(
        (mean - implied_mean).abs() / implied_mean <= 0.2,
        "mean queue wait {mean:.3} s, the rate implies {implied_mean:.3} s: {text}"
    );
    // The implied median, about (ITEMS / 2) / RATE = 1.5 s, is in the bucket
    // (1.024 s, 2.048 s]: at least half the items are at or below its top
    // bound, fewer than half at or below its bottom one.
    let at_most = |le: &str| series(&format!("bucket{{le=\"{le}\",tenant=\"slow\"}}"));
    let half = ITEMS as f64 / 2.0;
    assert!(
        at_most("2.048") >= half && at_most("1.024") < half,
        "the median wait is not in (1.024 s, 2.048 s]: {text}"
    );
}
