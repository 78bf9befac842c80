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
    // Sessions that outlive a loaded machine's pauses: a session taken for
    // dead loses its slots while its calls go on, which is not the cap's
    // failure but the expiry's.
    let args = ["--concurrency", "16", "--session-expiry", "10s"];
    let procs: Vec<Proc> = (0..3).map(|_| Proc::start(&db, &h.url(), &args)).collect();
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

/// A rate the limiter cannot pace, given to `processor run --rate-limit`
/// or `processor limits set --rate`: exit 2 before anything starts, with a
/// message naming the flag and showing how to write one (it used to panic
/// in the rate pool: "cannot convert float seconds to Duration").
#[test]
fn rates_the_limiter_cannot_pace_exit_2() {
    let run = ["run", "--handler-url", "http://x/", "--rate-limit"];
    let set = ["limits", "set", "--tenant", "a", "--rate"];
    for (args, rate, says) in [
        (&run[..], "1e-20/s", "below the least rate, 1/h"),
        (&run[..], "1e300/s", "above the greatest rate, 1000000/s"),
        (&run[..], "inf/s", "is not a rate"),
        (&set[..], "1e-20/s", "below the least rate, 1/h"),
        (&set[..], "0.5/h", "below the least rate, 1/h"),
    ] {
        let mut all = args.to_vec();
        all.extend([rate, "--database-url", "sqlite::memory:"]);
        let o = crate::cli::processor(&all, "");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{all:?}: {err}");
        let flag = args.last().unwrap();
        assert!(
            err.contains(&format!("'{flag} <")) && err.contains(says) && err.contains("e.g. 500/s"),
            "{all:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{all:?}: {err}");
    }
}

on_all_backends!(rates_out_of_range_are_refused_by_the_api_and_the_library);
/// `PUT /api/v1/limits/{tenant}` and `Store::set_limit` refuse a rate the
/// limiter cannot pace, saying how to write one, and store nothing.
async fn rates_out_of_range_are_refused_by_the_api_and_the_library(db: TestDb) {
    use crate::console_api::{TOKEN, send, serve};
    let base = serve(db.store.clone(), Some(TOKEN)).await;
    for body in [
        r#"{"rate": "1e-20/s"}"#,
        r#"{"rate": 1e-20}"#,
        r#"{"rate": 1e300}"#,
    ] {
        let (code, e) = send(
            reqwest::Method::PUT,
            &base,
            "/api/v1/limits/acme",
            Some(TOKEN),
            Some(body),
        )
        .await;
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(code, reqwest::StatusCode::BAD_REQUEST, "{body}: {e}");
        assert!(
            message.contains("greatest rate") || message.contains("least rate, 1/h"),
            "{body}: {message}"
        );
        assert!(message.contains("e.g. 500/s"), "{body}: {message}");
    }
    let mut limit = feed::store::limits::Limit {
        tenant: "acme".into(),
        rate: Some(1e-20),
        ..Default::default()
    };
    let e = db.store.set_limit(&limit).await.unwrap_err().to_string();
    assert!(e.contains("acme") && e.contains("least rate"), "{e}");
    limit.rate = Some(f64::INFINITY);
    assert!(db.store.set_limit(&limit).await.is_err());
    assert_eq!(db.count("SELECT COUNT(*) AS n FROM feed_limits").await, 0);
}

on_all_backends!(a_rate_written_by_hand_out_of_range_is_taken_as_the_nearest);
/// Rates written into `feed_limits` by hand that the limiter cannot pace
/// do not crash the processor: 1e-20/s is taken as 1/h (its first burst
/// of two items goes, then none), 1e300/s as 1000000/s (all of it goes),
/// and each is warned about once, not every heartbeat.
async fn a_rate_written_by_hand_out_of_range_is_taken_as_the_nearest(db: TestDb) {
    db.sql(
        "INSERT INTO feed_limits (tenant, rate, updated_at) VALUES ('tiny', 1e-20, 0), ('huge', 1e300, 0)",
    )
    .await;
    enqueue(&db, "tiny-0", 10, of("tiny")).await;
    enqueue(&db, "huge-0", 100, of("huge")).await;
    let h = Handler::start(|_| done()).await;
    let mut p = Proc::start(&db, &h.url(), &[]);
    let done_in = |partition: &'static str| {
        let db = &db;
        async move {
            db.count(&format!(
                "SELECT COUNT(*) AS n FROM feed_items WHERE partition_id = '{partition}' AND status = 'complete'"
            ))
            .await
        }
    };
    wait_for("huge's items done", Duration::from_secs(30), || async {
        done_in("huge-0").await == 100
    })
    .await;
    wait_for("tiny's burst done", Duration::from_secs(10), || async {
        done_in("tiny-0").await == 2
    })
    .await;
    // Five heartbeats more: tiny sends nothing, nothing is warned again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    p.check_alive().expect("the processor runs");
    let log = p.log();
    assert_eq!(
        done_in("tiny-0").await,
        2,
        "{}",
        crate::support::tail(&log, 20)
    );
    let warned = log.lines().filter(|l| l.contains("out of range")).count();
    assert_eq!(warned, 2, "{}", crate::support::tail(&log, 20));
    assert!(
        log.contains("used=1/h") && log.contains("used=1000000/s"),
        "{log}"
    );
}
