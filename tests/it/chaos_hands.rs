//! Chaos with hands in the database: while processors are killed, stopped
//! and started, someone deletes items, completes items by hand and adds
//! items to complete partitions with plain SQL. Whatever happened, every
//! partition ends `complete` or `failed` and no available item is left
//! behind (nothing stranded); every item added by hand is worked on.

use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;

use crate::behaviour;
use crate::support::{Backend, Handler, Proc, TestDb, done, json as reply, wait_for};

const PARTITIONS: usize = 40;
/// Partition p has 1 + p % MAX_ITEMS items: small ones close early.
const MAX_ITEMS: usize = 8;

/// Each item moves 0 → 1 → 2 and is done there.
fn answer(gate: i64) -> axum::response::Response {
    if gate >= 2 {
        done()
    } else {
        reply(200, json!({"gate": gate + 1}))
    }
}

/// The clause that makes a `SELECT` wait for, and then read, a row that a
/// concurrent transaction is changing (SQLite writes one at a time).
fn share_lock(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "",
        Backend::Postgres | Backend::Citus => " FOR SHARE",
        Backend::Mysql => " LOCK IN SHARE MODE",
    }
}

async fn ids(db: &TestDb, sql: &str) -> Vec<(String, String, i64)> {
    db.rows(sql, &["id", "pid", "gate"]).await
}

behaviour!(hand_changes_during_chaos_strand_nothing);
async fn hand_changes_during_chaos_strand_nothing(db: TestDb) {
    for p in 0..PARTITIONS {
        db.partition(&format!("p{p:02}"), true, false, "block")
            .await;
        for i in 0..=p % MAX_ITEMS {
            db.item(&format!("p{p:02}-{i}"), &format!("p{p:02}"), 0, json!({}))
                .await;
        }
    }
    let h = Handler::start_async(|c| async move {
        let ms = rand::rng().random_range(20..60);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        answer(c.gate)
    })
    .await;
    let url = h.url();
    // Few slots each, so the work outlasts much of the chaos.
    let flags: &[&str] = &["--concurrency", "2"];
    let mut alive: Vec<Proc> = (0..3).map(|_| Proc::start(&db, &url, flags)).collect();
    let mut added: Vec<String> = Vec::new();
    let began = Instant::now();
    let mut n = 0;
    // Twelve seconds of chaos, longer if no item added by hand is still
    // there to check (on a slow machine no partition may be complete yet).
    let enough = || began.elapsed() >= Duration::from_secs(12);
    while !enough() || (added.is_empty() && began.elapsed() < Duration::from_secs(90)) {
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..400))).await;
        n += 1;
        match rand::rng().random_range(0..6) {
            0 if alive.len() > 2 => {
                let i = rand::rng().random_range(0..alive.len());
                let mut p = alive.remove(i);
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            1 if alive.len() > 2 => {
                let i = rand::rng().random_range(0..alive.len());
                let mut p = alive.remove(i);
                tokio::task::spawn_blocking(move || p.terminate());
            }
            2 if alive.len() < 5 => alive.push(Proc::start(&db, &url, flags)),
            action @ (3 | 4) => {
                // An available item deleted, or completed, by hand.
                let available = ids(&db, "SELECT id, partition_id AS pid, gate FROM feed_items WHERE status = 'available'").await;
                if let Some((id, _, _)) = available.choose(&mut rand::rng()) {
                    let sql = if action == 3 {
                        added.retain(|a| a != id);
                        "DELETE FROM feed_items WHERE id = ?"
                    } else {
                        "UPDATE feed_items SET status = 'complete' WHERE id = ?"
                    };
                    db.by_hand(sql, vec![id.clone().into()]).await;
                }
            }
            _ => {
                let complete = ids(
                    &db,
                    "SELECT id, id AS pid, gate FROM feed_partitions WHERE status = 'complete'",
                )
                .await;
                if let Some((p, _, _)) = complete.choose(&mut rand::rng()) {
                    // The item takes the partition's gate in the same
                    // statement, and only while it is still complete: read
                    // first, an earlier hand-added item may have reopened
                    // it and moved its gate past the one read, and an item
                    // below the gate is failed as one that can never run.
                    let id = format!("hand-{n}");
                    let sql = format!(
                        "INSERT INTO feed_items (id, partition_id, gate, data) \
                         SELECT ?, id, gate, ? FROM feed_partitions WHERE id = ? AND status = 'complete'{}",
                        share_lock(db.backend)
                    );
                    let data = serde_json::to_vec(&json!({})).unwrap();
                    if db
                        .by_hand(&sql, vec![id.clone().into(), data.into(), p.clone().into()])
                        .await
                        == 1
                    {
                        added.push(id);
                    }
                }
            }
        }
    }
    // Whatever happened: with processors running, everything settles.
    wait_for("every partition finished, nothing available left", Duration::from_secs(90), || async {
        db.count("SELECT COUNT(*) AS n FROM feed_partitions WHERE status NOT IN ('complete', 'failed')").await == 0
            && db.count("SELECT COUNT(*) AS n FROM feed_items WHERE status = 'available'").await == 0
    })
    .await;
    for id in &added {
        let row = db.item_row(id).await;
        assert_eq!(row.status, "complete", "item {id} added by hand: {row:?}");
    }
    assert!(!alive.is_empty());
    assert!(
        !added.is_empty(),
        "no partition was complete during the chaos"
    );
    eprintln!(
        "[{:?}] {} hand-added items; {} calls; {} processors alive",
        db.backend,
        added.len(),
        h.calls().len(),
        alive.len()
    );
}
