//! Retention: `processor prune` and `run --retention` delete old complete
//! and cancelled partitions with their items, and nothing unfinished.

use std::time::Duration;

use sea_orm::Value;
use serde_json::json;

use crate::console_api::enqueue;
use crate::on_all_backends;
use crate::support::{Spawned, TestDb, done, wait_for};

/// Makes a partition `status`, its items `item_status`, last updated two hours ago.
async fn age(db: &TestDb, partition: &str, status: &str, item_status: &str) {
    db.exec(
        "UPDATE feed_items SET status = ? WHERE partition_id = ?",
        vec![item_status.into(), partition.into()],
    )
    .await;
    db.exec(
        "UPDATE feed_partitions SET status = ?, updated_at = {now} - 7200000 WHERE id = ?",
        vec![status.into(), partition.into()],
    )
    .await;
}

pub(crate) async fn count(db: &TestDb, table: &str) -> i64 {
    let rows = db
        .query(&format!("SELECT COUNT(*) AS n FROM {table}"), vec![])
        .await;
    rows[0].try_get("", "n").unwrap()
}

/// Old complete and cancelled partitions, plus others that must survive.
async fn fixture(db: &TestDb) {
    enqueue(db, "old-complete", false, &[("oc/1", 0), ("oc/2", 0)]).await;
    age(db, "old-complete", "complete", "complete").await;
    enqueue(db, "old-cancelled", false, &[("ox/1", 0)]).await;
    age(db, "old-cancelled", "cancelled", "cancelled").await;
    for (p, status, item) in [
        ("old-failed", "failed", "failed"),
        ("old-available", "available", "available"),
    ] {
        enqueue(db, p, false, &[(&format!("{p}/1"), 0)]).await;
        age(db, p, status, item).await;
    }
    enqueue(db, "new-complete", false, &[("nc/1", 0)]).await;
    db.sql("UPDATE feed_partitions SET status = 'complete' WHERE id = 'new-complete'")
        .await;
    // Reopened by a producer: fresh again, kept.
    enqueue(db, "reopened", false, &[("ro/1", 0)]).await;
    age(db, "reopened", "complete", "complete").await;
    enqueue(db, "reopened", false, &[("ro/2", 0)]).await;
    // An old cancelled partition that got an available item by hand with
    // SQL (its updated_at untouched): the item and so the partition stay.
    enqueue(db, "late", false, &[("late/1", 0)]).await;
    age(db, "late", "cancelled", "complete").await;
    db.item("late/2", "late", 0, json!({})).await;
}

on_all_backends!(prune_deletes_only_old_finished_partitions);
async fn prune_deletes_only_old_finished_partitions(db: TestDb) {
    fixture(&db).await;
    let (items, partitions) = (
        count(&db, "feed_items").await,
        count(&db, "feed_partitions").await,
    );
    let args = [
        "prune",
        "--finished-before",
        "1h",
        "--database-url",
        &db.url,
    ];
    let o = crate::cli::processor(&[&args[..], &["--dry-run"]].concat(), "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        out.contains("would delete 3 partitions, 5 items and 0 events"),
        "{out}"
    );
    assert_eq!(
        (
            count(&db, "feed_items").await,
            count(&db, "feed_partitions").await
        ),
        (items, partitions)
    );

    let o = crate::cli::processor(&args, "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("deleted 2 partitions, 4 items and 0 events"),
        "{out}"
    );
    let left: Vec<String> = db
        .query("SELECT id FROM feed_partitions ORDER BY id", vec![])
        .await
        .iter()
        .map(|r| r.try_get("", "id").unwrap())
        .collect();
    let mut expected = [
        "late",
        "new-complete",
        "old-available",
        "old-failed",
        "reopened",
    ];
    expected.sort();
    let mut left = left;
    left.sort();
    assert_eq!(left, expected);
    assert_eq!(db.item_row("late/2").await.status, "available");
    for id in ["old-available/1", "old-failed/1", "nc/1", "ro/1", "ro/2"] {
        db.item_row(id).await;
    }
    assert_eq!(count(&db, "feed_items").await, items - 4);
}

on_all_backends!(retention_prunes_from_one_processor);
async fn retention_prunes_from_one_processor(db: TestDb) {
    fixture(&db).await;
    let Spawned(_h, _proc) = Spawned::start(&db, &["--retention", "1h"], |_| done()).await;
    wait_for("old partitions pruned", Duration::from_secs(60), || async {
        db.query(
            "SELECT id FROM feed_partitions WHERE id IN ('old-complete', 'old-cancelled')",
            vec![],
        )
        .await
        .is_empty()
    })
    .await;
    // The maintenance lease names the processor and has not expired.
    let holder: Option<String> = db
        .query(
            "SELECT holder FROM feed_maintenance WHERE name = 'retention' AND expires_at > {now}",
            vec![],
        )
        .await[0]
        .try_get("", "holder")
        .unwrap();
    assert_eq!(holder, db.sessions().await.first().cloned());
    for p in ["old-failed", "old-available", "new-complete", "late"] {
        db.partition_row(p).await;
    }
    db.item_row("late/2").await;
}

/// What a many-partition fixture partition is, by its number.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Complete or cancelled and old: pruned with all its items.
    Finished,
    /// Reopened by hand (available, old) with one available item: kept whole.
    Reopened,
    /// Failed and old: never pruned.
    Failed,
    /// Cancelled and old but given an available item by hand: that item and
    /// the partition stay, its finished items go.
    Late,
}

fn kind(k: usize) -> Kind {
    match k % 10 {
        7 => Kind::Reopened,
        8 => Kind::Failed,
        9 => Kind::Late,
        _ => Kind::Finished,
    }
}

/// Rows in multi-row INSERTs of at most 400 rows.
async fn insert(db: &TestDb, into: &str, rows: Vec<Vec<Value>>) {
    for chunk in rows.chunks(400) {
        let one = format!("({})", vec!["?"; chunk[0].len()].join(", "));
        let all = vec![one.as_str(); chunk.len()].join(", ");
        db.exec(&format!("INSERT INTO {into} VALUES {all}"), chunk.concat())
            .await;
    }
}

on_all_backends!(prune_deletes_many_partitions_in_one_call);
/// More partitions than one page and more items per page than one delete
/// takes, with partitions that must survive spread through every page.
async fn prune_deletes_many_partitions_in_one_call(db: TestDb) {
    const PARTITIONS: usize = 1500;
    const ITEMS: usize = 10;
    let (mut parts, mut items) = (Vec::new(), Vec::new());
    for k in 0..PARTITIONS {
        let id = format!("m-{k:05}");
        let (status, item_status) = match kind(k) {
            Kind::Finished if k % 2 == 0 => ("complete", "complete"),
            Kind::Finished => ("cancelled", "cancelled"),
            Kind::Reopened => ("available", "complete"),
            Kind::Failed => ("failed", "failed"),
            Kind::Late => ("cancelled", "cancelled"),
        };
        parts.push(vec![id.clone().into(), status.into(), 0i64.into()]);
        for j in 0..ITEMS {
            let available = j == 0 && matches!(kind(k), Kind::Reopened | Kind::Late);
            items.push(vec![
                format!("{id}/{j}").into(),
                id.clone().into(),
                (if available { "available" } else { item_status }).into(),
                b"{}".to_vec().into(),
            ]);
        }
    }
    insert(&db, "feed_partitions (id, status, updated_at)", parts).await;
    insert(&db, "feed_items (id, partition_id, status, data)", items).await;

    let pruned = db
        .store
        .prune(Duration::from_secs(3600), false)
        .await
        .unwrap();
    let count_of = |want: Kind| (0..PARTITIONS).filter(|&k| kind(k) == want).count() as u64;
    let (finished, late) = (count_of(Kind::Finished), count_of(Kind::Late));
    assert_eq!(pruned.partitions, finished);
    assert_eq!(
        pruned.items,
        finished * ITEMS as u64 + late * (ITEMS as u64 - 1)
    );

    let left: Vec<String> = db
        .rows("SELECT id FROM feed_partitions ORDER BY id", &["id"])
        .await;
    let kept: Vec<String> = (0..PARTITIONS)
        .filter(|&k| kind(k) != Kind::Finished)
        .map(|k| format!("m-{k:05}"))
        .collect();
    assert_eq!(left, kept);
    // Every available item kept; of the others only the reopened and failed
    // partitions' items.
    let by_status: Vec<(String, i64)> = db
        .rows(
            "SELECT status, COUNT(*) AS n FROM feed_items GROUP BY status ORDER BY status",
            &["status", "n"],
        )
        .await;
    let reopened = count_of(Kind::Reopened) as i64;
    let failed = count_of(Kind::Failed) as i64;
    assert_eq!(
        by_status,
        [
            ("available".to_string(), reopened + late as i64),
            ("complete".to_string(), reopened * (ITEMS as i64 - 1)),
            ("failed".to_string(), failed * ITEMS as i64),
        ]
    );
    // A second call finds nothing more to delete.
    let again = db.store.prune(Duration::ZERO, false).await.unwrap();
    assert_eq!((again.partitions, again.items), (0, 0));
}

on_all_backends!(completions_are_counted_per_minute);
/// The overview's chart counts what processors complete, one row per
/// minute; a row from before the last hour goes with `prune`, the current
/// minute stays.
async fn completions_are_counted_per_minute(db: TestDb) {
    let items: Vec<(String, i64)> = (0..30).map(|k| (format!("c/{k}"), 0)).collect();
    let items: Vec<(&str, i64)> = items.iter().map(|(id, g)| (id.as_str(), *g)).collect();
    enqueue(&db, "counted", false, &items).await;
    let scene = Spawned::start(&db, &[], |_| done()).await;
    db.wait_partition("counted", "complete").await;
    let counted = |o: &feed::store::overview::Overview| {
        o.completed_per_minute.iter().map(|(_, n)| n).sum::<i64>()
    };
    // Counts are added once a second, so the first look may be early.
    wait_for(
        "the 30 completed items counted",
        Duration::from_secs(10),
        || async { counted(&db.store.overview().await.unwrap()) >= 30 },
    )
    .await;
    drop(scene);
    let overview = db.store.overview().await.unwrap();
    assert_eq!(counted(&overview), 30, "every completed item counted once");
    // One row, or two when the drain crossed a minute.
    let recent = count(&db, "feed_completions").await;
    db.exec(
        "INSERT INTO feed_completions (minute, items) VALUES ({now} - 7200000, 5)",
        vec![],
    )
    .await;
    assert_eq!(count(&db, "feed_completions").await, recent + 1);
    db.store.prune(Duration::ZERO, false).await.unwrap();
    assert_eq!(
        count(&db, "feed_completions").await,
        recent,
        "the old minute is gone"
    );
    let overview = db.store.overview().await.unwrap();
    assert_eq!(counted(&overview), 30, "the last hour stays");
}
