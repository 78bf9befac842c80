//! Priorities: among the partitions that share turns (one tenant's, or
//! those of no tenant), higher ones are served first, strictly; set at
//! enqueue and changed live by the command line and the API.

use feed::store::{NewItem, PartitionSpec};
use serde_json::json;

use crate::behaviour;
use crate::cli::processor;
use crate::support::{Spawned, TestDb, done};

/// Partition `id` of `n` items (`id-0`, …) with `tenant` and `priority`.
async fn enqueue(db: &TestDb, id: &str, n: usize, tenant: Option<&str>, priority: i32) {
    let mut spec = PartitionSpec::default();
    spec.tenant = tenant.map(Into::into);
    spec.priority = priority;
    let items = (0..n)
        .map(|i| NewItem::new(b"{}".to_vec()).with_id(format!("{id}-{i}")))
        .collect();
    db.store.enqueue(id, &spec, items).await.unwrap();
}

/// The partitions of the items called, in call order (one slot).
async fn served(db: &TestDb, partitions: &[&str]) -> Vec<String> {
    let Spawned(h, _p) = Spawned::start(db, &["--concurrency", "1"], |_| done()).await;
    for p in partitions {
        db.wait_partition(p, "complete").await;
    }
    h.calls()
        .into_iter()
        .map(|c| c.item.rsplit_once('-').unwrap().0.to_string())
        .collect()
}

behaviour!(a_higher_priority_is_served_first);
/// With one slot, ten partitions of priority 0 and, written after them, a
/// partition of priority 10 (named to sort last) and one of -10: the
/// priority-10 partition's three items are served first, strictly (none
/// of the others' in between), the priority -10 one's last. The same
/// within one tenant.
async fn a_higher_priority_is_served_first(db: TestDb) {
    for tenant in [None, Some("acme")] {
        let name = |n: &str| format!("{}{n}", tenant.unwrap_or("none"));
        let mut all = Vec::new();
        for i in 0..10 {
            all.push(name(&format!("-p{i}")));
            enqueue(&db, all.last().unwrap(), 1, tenant, 0).await;
        }
        let (urgent, late) = (name("-zz-urgent"), name("-late"));
        enqueue(&db, &urgent, 3, tenant, 10).await;
        enqueue(&db, &late, 1, tenant, -10).await;
        all.extend([urgent.clone(), late.clone()]);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let order = served(&db, &refs).await;
        assert_eq!(order.len(), 14, "{order:?}");
        assert_eq!(
            order[..3],
            [urgent.clone(), urgent.clone(), urgent],
            "{order:?}"
        );
        assert_eq!(order[13], late, "{order:?}");
    }
}

behaviour!(priority_is_set_and_changed_everywhere);
/// `enqueue --priority`, the API's `priority` query parameter and the
/// library set it; `processor priority` and `POST
/// /api/v1/partitions/{id}/priority` change it; `status` and the API show
/// it; out of range is refused with what the range is.
async fn priority_is_set_and_changed_everywhere(db: TestDb) {
    let url = db.url.clone();
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &url,
            "--partition",
            "c",
            "--priority",
            "-7",
        ],
        "{\"data\": 1}\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(db.store.partition("c").await.unwrap().priority, -7);
    let o = processor(
        &[
            "priority",
            "--database-url",
            &url,
            "--partition",
            "c",
            "--priority",
            "12",
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(db.store.partition("c").await.unwrap().priority, 12);
    let o = processor(
        &[
            "priority",
            "--database-url",
            &url,
            "--partition",
            "c",
            "--priority",
            "1001",
        ],
        "",
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1000"));
    let o = processor(
        &[
            "priority",
            "--database-url",
            &url,
            "--partition",
            "nope",
            "--priority",
            "1",
        ],
        "",
    );
    assert!(!o.status.success());
    let o = processor(
        &[
            "status",
            "--database-url",
            &url,
            "--partition",
            "c",
            "--json",
        ],
        "",
    );
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["partitions"][0]["priority"], 12, "{shown}");

    let base =
        crate::enqueue_api::serve(db.store.clone(), Some(crate::enqueue_api::ADMIN), None).await;
    let admin = Some(crate::enqueue_api::ADMIN);
    let (code, _) = crate::enqueue_api::send(
        &base,
        "/api/v1/partitions/a/items?priority=5",
        admin,
        None,
        "{\"data\": 1}",
    )
    .await;
    assert_eq!(code, 200);
    let (code, p) = crate::enqueue_api::send(
        &base,
        "/api/v1/partitions/a/priority",
        admin,
        None,
        json!({"priority": -3}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{p}");
    assert_eq!(p["priority"], -3, "{p}");
    let (code, e) = crate::enqueue_api::send(
        &base,
        "/api/v1/partitions/a/priority",
        admin,
        None,
        json!({"priority": 5000}).to_string(),
    )
    .await;
    assert_eq!(code, 400, "{e}");
    assert!(e.to_string().contains("-1000 to 1000"), "{e}");
    let (code, _) = crate::enqueue_api::send(
        &base,
        "/api/v1/partitions/b/items?priority=5000",
        admin,
        None,
        "{\"data\": 1}",
    )
    .await;
    assert_eq!(code, 400);
}
