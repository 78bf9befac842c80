//! Where the item path's statements run: on Citus each reads or writes
//! the one shard of its partition, counted by Citus itself
//! (`citus_stat_counters`: executions that ran on one shard and on
//! several). Elsewhere the same calls simply do their work.

use testkit::Backend;

use super::fence::done;
use super::{EXPIRY, Kit, conformance};
use crate::ids::PartitionId;
use crate::store::{Ask, GateProbe, Store};

conformance!(the_item_path_runs_on_its_partitions_shard);

/// Executions on one shard and on several so far, in this database, of
/// statements from connections that count them (Citus only).
async fn executions(k: &Kit) -> (i64, i64) {
    k.rows(
        "SELECT query_execution_single_shard AS one, query_execution_multi_shard AS several \
         FROM citus_stat_counters WHERE name = current_database()",
        &["one", "several"],
    )
    .await
    .into_iter()
    .next()
    .expect("the database's counters")
}

async fn the_item_path_runs_on_its_partitions_shard(k: Kit) {
    let citus = k.backend == Backend::Citus;
    let store = if citus {
        // A new store: its connections count their executions.
        let name: Vec<(String,)> = k.rows("SELECT current_database() AS n", &["n"]).await;
        k.sql(&format!(
            "ALTER DATABASE {} SET citus.enable_stat_counters = on",
            name[0].0
        ))
        .await;
        Store::connect(&k.db.url, 4).await.unwrap()
    } else {
        k.store.clone()
    };
    let me = "s1".into();
    k.session("s1").await;
    for p in ["a", "b", "c", "d", "e", "f"] {
        k.partition(p, Some("s1")).await;
    }
    k.items(&[
        ("a/0", "a", 0, "available"),
        ("a/1", "a", 0, "available"),
        ("b/0", "b", 0, "available"),
        ("c/0", "c", 0, "complete"),
        ("d/0", "d", 0, "complete"),
        ("e/0", "e", 0, "complete"),
        ("e/1", "e", 1, "available"),
        ("f/0", "f", 0, "complete"),
    ])
    .await;
    let before = if citus { executions(&k).await } else { (0, 0) };

    // After each call, no execution over several shards (on Citus).
    let mut seen = before;
    let mut on_one_shard = async |what: &str| {
        if citus {
            let now = executions(&k).await;
            assert_eq!(now.1, seen.1, "{what}: executions over several shards");
            seen = now;
        }
    };
    let asks = [Ask::from(("a".into(), 10)), Ask::from(("b".into(), 10))];
    assert_eq!(store.ready_items(&me, &asks).await.unwrap().len(), 3);
    on_one_shard("dispatch read").await;
    // Two results of one partition (a batch) and one of another.
    let acks = [
        done("a/0", "a", "s1", 0, 0),
        done("a/1", "a", "s1", 0, 0),
        done("b/0", "b", "s1", 0, 0),
    ];
    let written = store.write_results(&acks, EXPIRY).await.unwrap();
    assert_eq!(written.len(), 3);
    on_one_shard("result writes").await;
    let ids: Vec<PartitionId> = ["a", "b", "e", "f"].map(PartitionId::from).to_vec();
    let checked = store.partitions_for_check(&me, &ids).await.unwrap();
    assert_eq!(checked.len(), 4);
    on_one_shard("gate check").await;
    let finished = [("c".into(), 0), ("d".into(), 0)];
    assert_eq!(store.close_finished(&finished, &me).await.unwrap().len(), 2);
    on_one_shard("close of finished partitions").await;
    let (e, probe) = checked.iter().find(|(p, _)| p.id.as_str() == "e").unwrap();
    assert_eq!(*probe, GateProbe::Next(Some(1)));
    assert!(store.advance_gate(e, &me, 1).await.unwrap());
    on_one_shard("gate advance").await;
    let f: Vec<_> = checked
        .iter()
        .filter(|(p, _)| p.id.as_str() == "f")
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(store.close_partitions(&f, &me).await.unwrap().len(), 1);
    on_one_shard("close").await;

    if citus {
        let (one, several) = executions(&k).await;
        assert_eq!(several - before.1, 0, "executions over several shards");
        assert!(
            one - before.0 >= 8,
            "{} executions on one shard",
            one - before.0
        );
    }
}
