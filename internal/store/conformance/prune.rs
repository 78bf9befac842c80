//! Retention: only finished (`complete`, `cancelled`) partitions older
//! than the cutoff go, with their items; each delete re-checks its guard,
//! so an available item (added by hand to a finished partition) keeps
//! itself and its partition. The maintenance lease has one holder at a time.

use std::time::Duration;

use super::{Kit, conformance};
use crate::status::Status;
use crate::store::driver::sql;
use crate::store::prune::Pruned;

conformance!(
    prune_deletes_only_old_finished_work,
    the_maintenance_lease_has_one_holder,
);

const HOUR: Duration = Duration::from_secs(3600);

async fn prune_deletes_only_old_finished_work(k: Kit) {
    let cases = [
        ("old-complete", "complete", true),
        ("old-cancelled", "cancelled", true),
        ("old-failed", "failed", true),
        ("old-available", "available", true),
        ("new-complete", "complete", false),
        ("stray", "complete", true),
    ];
    for (id, status, old) in cases {
        k.partition(id, None).await;
        k.item(
            &format!("{id}/0"),
            id,
            0,
            if status == "available" {
                "available"
            } else {
                "complete"
            },
        )
        .await;
        k.exec(sql!(k.store.driver();
            "UPDATE feed_partitions SET status = " {status} ", updated_at = CASE WHEN " {old}
            " THEN 0 ELSE updated_at END WHERE id = " {id}
        ))
        .await;
        if let Some(ended) = Status::parse(status).filter(|s| *s != Status::Available) {
            k.event(id, ended).await;
        }
    }
    k.item("stray/1", "stray", 0, "available").await;
    // Their events: old ones go unless their delivery failed.
    k.sqls(&[
        "UPDATE feed_events SET created_at = 0 WHERE partition_id <> 'new-complete'",
        "UPDATE feed_events SET status = 'failed' WHERE partition_id = 'old-failed'",
        "UPDATE feed_events SET status = 'delivered' WHERE partition_id = 'old-complete'",
    ])
    .await;
    let would = k.store.prune(HOUR, true).await.unwrap();
    assert_eq!(
        would,
        Pruned {
            partitions: 3,
            items: 4,
            events: 3
        }
    );
    let done = k.store.prune(HOUR, false).await.unwrap();
    assert_eq!(
        done,
        Pruned {
            partitions: 2,
            items: 3,
            events: 3
        },
        "the stray item keeps its partition"
    );
    let left = k.ids("SELECT id FROM feed_partitions ORDER BY id").await;
    assert_eq!(
        left,
        ["new-complete", "old-available", "old-failed", "stray"]
    );
    assert_eq!(
        k.ids("SELECT partition_id AS id FROM feed_events ORDER BY id")
            .await,
        ["new-complete", "old-failed"]
    );
    assert_eq!(
        k.ids("SELECT id FROM feed_items WHERE partition_id = 'stray'")
            .await,
        ["stray/1"]
    );
    assert_eq!(
        k.store.prune(HOUR, true).await.unwrap(),
        Pruned {
            partitions: 1,
            items: 1,
            events: 0
        }
    );
}

async fn the_maintenance_lease_has_one_holder(k: Kit) {
    let store = &k.store;
    let lease = |name: &'static str, holder: &'static str| async move {
        store
            .lease_maintenance(name, &holder.into(), HOUR)
            .await
            .unwrap()
    };
    assert!(lease("retention", "a").await);
    assert!(lease("retention", "a").await, "renewed");
    assert!(!lease("retention", "b").await);
    k.sql("UPDATE feed_maintenance SET expires_at = 0").await;
    assert!(lease("retention", "b").await, "taken over once expired");
    assert!(!lease("retention", "a").await);
    assert!(!lease("unknown", "a").await, "one row per task");
}
