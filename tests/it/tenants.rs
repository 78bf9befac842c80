//! Flow control by tenant and by partition: a tenant's in-flight cap
//! across the fleet, fairness across tenants, per-partition overrides, and
//! limits edited live by SQL and the command line.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use feed::store::{NewItem, PartitionSpec};
use parking_lot::Mutex;

use crate::on_all_backends;
use crate::support::{Handler, Proc, TestDb, done, wait_for};

/// Creates `partition` with `n` items, of `tenant` and with the overrides given.
pub(crate) async fn enqueue(db: &TestDb, partition: &str, n: usize, spec: PartitionSpec) {
    let items: Vec<NewItem> = (0..n)
        .map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("{partition}/{i}")))
        .collect();
    db.store.enqueue(partition, &spec, items).await.unwrap();
}

pub(crate) fn of(tenant: &str) -> PartitionSpec {
    let mut spec = PartitionSpec::default();
    spec.tenant = Some(tenant.into());
    spec
}

/// Calls at the handler at once, by key (now, most ever).
#[derive(Default)]
pub(crate) struct Concurrency(Mutex<HashMap<String, (u32, u32)>>);

impl Concurrency {
    fn enter(&self, key: &str) {
        let mut m = self.0.lock();
        let e = m.entry(key.to_string()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
    }

    fn leave(&self, key: &str) {
        self.0.lock().get_mut(key).unwrap().0 -= 1;
    }

    pub(crate) fn most(&self, key: &str) -> u32 {
        self.0.lock().get(key).map_or(0, |e| e.1)
    }

    /// Forgets the most seen so far (a new measurement starts).
    pub(crate) fn reset(&self) {
        for e in self.0.lock().values_mut() {
            e.1 = e.0;
        }
    }
}

/// A handler that holds each call for `hold`, counting calls at once by
/// the part of the partition id before the first `-`.
pub(crate) async fn holding(hold: Duration) -> (Handler, Arc<Concurrency>) {
    let seen = Arc::new(Concurrency::default());
    let s = seen.clone();
    let h = Handler::start_async(move |call| {
        let s = s.clone();
        async move {
            let key = call.partition.split('-').next().unwrap().to_string();
            s.enter(&key);
            tokio::time::sleep(hold).await;
            s.leave(&key);
            done()
        }
    })
    .await;
    (h, seen)
}

on_all_backends!(a_tenants_cap_holds_across_three_processors);
/// A tenant capped at 4 items in flight (set with SQL), its work spread
/// over 12 partitions that three processors share: the handler never sees
/// more than 4 of its calls at once, and all of them finish; partitions of
/// another tenant meanwhile go at full speed.
async fn a_tenants_cap_holds_across_three_processors(db: TestDb) {
    db.sql("INSERT INTO feed_limits (tenant, max_in_flight) VALUES ('acme', 4)")
        .await;
    let (h, seen) = holding(Duration::from_millis(20)).await;
    let procs: Vec<Proc> = (0..3)
        .map(|_| Proc::start(&db, &h.url(), &["--concurrency", "16"]))
        .collect();
    // All three live before the work comes, so that each leases at most a
    // third of the partitions and acme's twelve cannot all go to one.
    wait_for("three sessions", Duration::from_secs(30), || async {
        db.sessions().await.len() == 3
    })
    .await;
    for p in 0..12 {
        enqueue(&db, &format!("acme-{p}"), 25, of("acme")).await;
        enqueue(&db, &format!("other-{p}"), 25, of("other")).await;
    }
    db.wait_complete(600).await;
    let senders: std::collections::HashSet<String> = h
        .calls()
        .into_iter()
        .filter(|c| c.partition.starts_with("acme"))
        .map(|c| c.processor)
        .collect();
    eprintln!(
        "acme: at most {} at once from {} processors; other: at most {}",
        seen.most("acme"),
        senders.len(),
        seen.most("other")
    );
    assert!(
        seen.most("acme") <= 4,
        "acme had {} calls at once",
        seen.most("acme")
    );
    assert!(senders.len() >= 2, "the cap is shared, not one processor's");
    assert!(seen.most("other") > 4, "the cap binds acme only");
    drop(procs);
}

on_all_backends!(partition_overrides_set_its_cap_and_its_share);
/// A partition's own `max_in_flight` caps its calls at once whatever the
/// processor's flags; a partition of weight 4 gets about four times the
/// calls of one of weight 1 while both have work.
async fn partition_overrides_set_its_cap_and_its_share(db: TestDb) {
    let mut capped = PartitionSpec::default();
    capped.max_in_flight = Some(2);
    enqueue(&db, "capped-0", 60, capped).await;
    let mut heavy = PartitionSpec::default();
    heavy.weight = Some(4);
    enqueue(&db, "heavy-0", 2_000, heavy).await;
    enqueue(&db, "light-0", 2_000, PartitionSpec::default()).await;
    let (h, seen) = holding(Duration::from_millis(5)).await;
    let _p = Proc::start(&db, &h.url(), &["--concurrency", "16"]);
    db.wait_complete(4_060).await;
    let calls = h.calls();
    let heavy_end = calls
        .iter()
        .filter(|c| c.partition == "heavy-0")
        .map(|c| c.at)
        .max()
        .unwrap();
    let light = calls
        .iter()
        .filter(|c| c.partition == "light-0" && c.at <= heavy_end)
        .count();
    let ratio = 2_000.0 / light as f64;
    eprintln!(
        "capped: at most {} at once; heavy:light calls while both had work {ratio:.1}",
        seen.most("capped")
    );
    assert!(
        seen.most("capped") <= 2,
        "capped had {} at once",
        seen.most("capped")
    );
    assert!(
        ratio >= 2.5,
        "weight 4 got {ratio:.1}x the calls of weight 1"
    );
}
