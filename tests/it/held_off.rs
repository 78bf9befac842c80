//! A processor whose handler is away gives its partitions back: one
//! started with a `--handler-url` where nothing listens, beside two
//! healthy ones, does not keep the partitions it leased.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::behaviour;
use crate::cli::{processor, text};
use crate::support::{
    DownHandler, Handler, Proc, TestDb, done, metric, numbered, retry_after, wait_for,
};
use crate::wrong_url::readyz;

/// What `status`, `/readyz` and the console say of such a processor.
const RELEASING: &str = "held off: releasing partitions";

/// Partitions some processor holds.
const HELD: &str = "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner IS NOT NULL";

/// `partitions` partitions `p0`… of `items` items each.
async fn seed(db: &TestDb, partitions: usize, items: usize) {
    for p in 0..partitions {
        let ids = numbered(&format!("p{p}/"), items);
        db.partition_of(&format!("p{p}"), true, false, "block", &ids)
            .await;
    }
}

/// Seeds the partitions, then starts a processor whose handler is down
/// and waits until it has leased some.
async fn bad_first(db: &TestDb, partitions: usize, items: usize) -> (DownHandler, Proc) {
    seed(db, partitions, items).await;
    let (down, bad) = DownHandler::start(db, &[]);
    wait_for(
        "the bad processor to lease partitions",
        Duration::from_secs(30),
        || async { db.count(HELD).await > 0 },
    )
    .await;
    (down, bad)
}

behaviour!(a_held_off_processor_gives_its_partitions_back);
/// The bad processor starts first and leases every partition; its handler
/// refuses connections. Once it has held off for longer than the session
/// expiry it releases them and takes none but to probe, so the two
/// healthy processors complete every partition; it ends holding nothing
/// and says why (`/readyz`, `status`).
async fn a_held_off_processor_gives_its_partitions_back(db: TestDb) {
    const PARTITIONS: usize = 6;
    let (_down, bad) = bad_first(&db, PARTITIONS, 30).await;
    let me = db
        .sessions()
        .await
        .pop()
        .expect("the bad processor's session");
    // A little slower than at once, so that the partitions are not all
    // done by the time the bad processor gives its partitions back.
    let handler = Handler::start_async(|_| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        done()
    })
    .await;
    let _good: Vec<Proc> = (0..2)
        .map(|_| Proc::start(&db, &handler.url(), &[]))
        .collect();
    let complete = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    wait_for(
        "every partition to complete",
        Duration::from_secs(90),
        || async { db.count(complete).await == PARTITIONS as i64 },
    )
    .await;
    let failed = "SELECT COUNT(*) AS n FROM feed_items WHERE status = 'failed'";
    assert_eq!(db.count(failed).await, 0);
    let mine = format!(
        "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner = '{me}' AND status = 'available'"
    );
    assert_eq!(db.count(&mine).await, 0, "the bad processor holds nothing");
    wait_for(
        "the bad processor to hold nothing",
        Duration::from_secs(30),
        || async { metric(&bad.metrics().await, "feed_partitions_held") == 0.0 },
    )
    .await;
    wait_for(
        "/readyz to say it releases",
        Duration::from_secs(30),
        || async {
            let r = readyz(&bad).await;
            r["releasing"] == true && r["held"].as_str().is_some_and(|h| h.contains(RELEASING))
        },
    )
    .await;
    wait_for(
        "status to say it releases",
        Duration::from_secs(30),
        || async {
            text(&processor(&["status", "--database-url", &db.url], "")).contains(RELEASING)
        },
    )
    .await;
    assert_eq!(db.count(&mine).await, 0, "the bad processor holds nothing");
    assert!(handler.calls().len() >= PARTITIONS * 30);
}

behaviour!(it_takes_partitions_again_once_its_handler_answers);
/// Alone, a processor whose handler is away keeps its partitions: nobody
/// would take them. Beside a peer that dispatches (capped at one
/// partition, so some stay free) it gives them back and probes, one
/// leased partition at a time; once the handler listens a probe reaches
/// it, and it takes partitions again and completes them.
async fn it_takes_partitions_again_once_its_handler_answers(db: TestDb) {
    seed(&db, 3, 60).await;
    let (down, p) = DownHandler::start(&db, &[]);
    // Held off for three session expiries (2 s each in FAST).
    wait_for("a hold-off of 6 s", Duration::from_secs(30), || async {
        let since = metric(&p.metrics().await, "feed_held_off_since_seconds");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since > 0.0 && now.unwrap().as_secs_f64() - since >= 6.0
    })
    .await;
    assert_eq!(db.count(HELD).await, 3, "alone, it keeps its partitions");
    assert_eq!(readyz(&p).await["releasing"], false);
    // A slow peer, one call at a time: partitions stay free meanwhile.
    let handler = Handler::start_async(|_| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        done()
    })
    .await;
    let peer = ["--max-partitions", "1", "--concurrency", "1"];
    let _peer = Proc::start(&db, &handler.url(), &peer);
    wait_for(
        "/readyz to say it releases",
        Duration::from_secs(30),
        || async { readyz(&p).await["releasing"] == true },
    )
    .await;
    wait_for(
        "a partition leased to probe with",
        Duration::from_secs(30),
        || async {
            p.log()
                .contains("leased a partition to probe the handler with")
        },
    )
    .await;
    let back = down.up(|_| done()).await;
    let complete = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    wait_for(
        "every partition to complete",
        Duration::from_secs(60),
        || async { db.count(complete).await == 3 },
    )
    .await;
    assert!(!back.calls().is_empty(), "it delivered again");
    assert!(
        p.log().contains("taking partitions again"),
        "{}",
        p.log_tail(30)
    );
    let r = readyz(&p).await;
    assert_eq!(r["releasing"], false, "{r}");
    let attempts = "SELECT COUNT(*) AS n FROM feed_items WHERE attempts > 1";
    assert_eq!(
        db.count(attempts).await,
        0,
        "no attempt was counted while away"
    );
}

behaviour!(it_rejoins_when_its_peers_hold_every_partition);
/// The bad processor gives its partitions back and the healthy one holds
/// them all, busy: none is free to probe with. Once its handler listens,
/// a probe on a partition stolen from the busy one (at most once per six
/// session expiries) finds it back, and it takes a share of the work.
async fn it_rejoins_when_its_peers_hold_every_partition(db: TestDb) {
    const PARTITIONS: usize = 4;
    let (down, bad) = bad_first(&db, PARTITIONS, 150).await;
    // One call at a time, 50 ms each: half a minute of work for it alone.
    let slow = Handler::start_async(|_| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        done()
    })
    .await;
    let _good = Proc::start(&db, &slow.url(), &["--concurrency", "1"]);
    wait_for(
        "/readyz to say it releases",
        Duration::from_secs(30),
        || async { readyz(&bad).await["releasing"] == true },
    )
    .await;
    let free = "SELECT COUNT(*) AS n FROM feed_partitions WHERE owner IS NULL";
    wait_for(
        "the healthy processor to hold every partition",
        Duration::from_secs(30),
        || async { db.count(free).await == 0 },
    )
    .await;
    let back = down.up(|_| done()).await;
    wait_for(
        "the bad processor to deliver again",
        Duration::from_secs(60),
        || async { !back.calls().is_empty() },
    )
    .await;
    let complete = "SELECT COUNT(*) AS n FROM feed_partitions WHERE status = 'complete'";
    wait_for(
        "every partition to complete",
        Duration::from_secs(120),
        || async { db.count(complete).await == PARTITIONS as i64 },
    )
    .await;
    assert!(
        bad.log().contains("stole partition"),
        "{}",
        bad.log_tail(30)
    );
    assert_eq!(readyz(&bad).await["releasing"], false);
}

behaviour!(an_outage_of_the_whole_fleet_spreads_the_partitions_again);
/// The bad processor gives its partitions back to a healthy peer; then
/// the peer's handler answers 503 to every call too, its breaker opens
/// and it holds off. No processor dispatches any more, so giving
/// partitions back would only move them around: the bad processor takes
/// its share again, still held off, and the leases end spread over both.
async fn an_outage_of_the_whole_fleet_spreads_the_partitions_again(db: TestDb) {
    const PARTITIONS: usize = 8;
    let (_down, bad) = bad_first(&db, PARTITIONS, 100).await;
    let away = Arc::new(AtomicBool::new(false));
    let answers = away.clone();
    let handler = Handler::start_async(move |_| {
        let away = answers.load(Ordering::Relaxed);
        async move {
            if away {
                return retry_after(503, "1", "down");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            done()
        }
    })
    .await;
    let _peer = Proc::start(&db, &handler.url(), &["--concurrency", "1"]);
    wait_for(
        "/readyz to say it releases",
        Duration::from_secs(30),
        || async { readyz(&bad).await["releasing"] == true },
    )
    .await;
    away.store(true, Ordering::Relaxed);
    wait_for(
        "the bad processor to take its share again",
        Duration::from_secs(60),
        || async {
            readyz(&bad).await["releasing"] == false
                && metric(&bad.metrics().await, "feed_partitions_held") >= 2.0
        },
    )
    .await;
    assert!(
        bad.log().contains("no other processor dispatches either"),
        "{}",
        bad.log_tail(30)
    );
    let r = readyz(&bad).await;
    assert!(
        r["held"].as_str().is_some_and(|h| !h.contains(RELEASING)),
        "{r}"
    );
}
