//! The chaos test's world: the plan of every item, the handler that
//! performs one step of it and records what it saw, and queries of the
//! database the phases wait on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use rand::seq::IndexedRandom;
use sea_orm::ConnectionTrait;
use serde_json::{Value as Json, json};

use crate::support::{Call, Proc, TestDb, json as reply, retry_after};

pub const PARTITIONS: usize = 128;
pub const ITEMS: usize = 3;
/// `--session-expiry` in `support::FAST`.
pub const EXPIRY: Duration = Duration::from_secs(2);
/// `--drain-timeout` in `support::FAST`.
pub const DRAIN: Duration = Duration::from_secs(5);
/// Processors kept running in steady phases; the chaos keeps 2 to 5 alive.
pub const STEADY: usize = 3;
/// Few slots each, so the work outlasts the chaos and partitions move while busy.
pub const FLAGS: &[&str] = &["--concurrency", "4", "--max-attempts", "0"];

/// The gates of an item's steps: 1–2 steps at gate 0, 1–2 at gate 1, 1 at gate 2.
pub fn plan(p: usize, i: usize) -> Vec<i64> {
    let h = p * 7 + i * 3;
    let mut gates = vec![0; 1 + h % 2];
    gates.extend(std::iter::repeat_n(1, 1 + (h / 2) % 2));
    gates.push(2);
    gates
}

pub fn partition_id(p: usize) -> String {
    format!("p{p:03}")
}

pub fn item_id(p: usize, i: usize) -> String {
    format!("p{p:03}-i{i}")
}

/// One handler call, as the test's handler saw and answered it.
#[derive(Clone, Debug)]
pub struct Rec {
    pub call: Call,
    /// `step` in the data received (the step this call performs).
    pub step: i64,
    /// Answered 503 + `Retry-After` while the test holds the work (balance
    /// phases): an attempt, not a delivery of the step.
    pub hold: bool,
    /// When the answer was produced (the result is written after this).
    pub end: Instant,
    /// The partition's owner in the database just before answering.
    pub owner: Result<Option<String>, String>,
}

pub async fn owner_of(store: &feed::Store, partition: &str) -> Result<Option<String>, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let q = testkit::statement(
            store.driver(),
            "SELECT owner FROM feed_partitions WHERE id = ?",
            vec![partition.into()],
        );
        match store.connection().query_one_raw(q).await {
            Ok(Some(row)) => return row.try_get("", "owner").map_err(|e| e.to_string()),
            Ok(None) => return Err(format!("no partition {partition}")),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last)
}

/// The handler: performs one step of the item's plan, after a random delay.
pub async fn answer(
    c: Call,
    hold: Arc<AtomicBool>,
    recs: Arc<Mutex<Vec<Rec>>>,
    store: feed::Store,
) -> axum::response::Response {
    let step = c.data["step"].as_i64().unwrap_or(-1);
    if hold.load(Ordering::SeqCst) {
        recs.lock().push(Rec {
            call: c,
            step,
            hold: true,
            end: Instant::now(),
            owner: Ok(None),
        });
        return retry_after(503, "1", "held");
    }
    // Mostly quick calls, some slow ones (likely in flight when a processor dies).
    let delay = {
        let mut r = rand::rng();
        if r.random_bool(0.05) {
            r.random_range(600..1500)
        } else {
            r.random_range(20..250)
        }
    };
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let owner = owner_of(&store, &c.partition).await;
    let plan: Vec<i64> = c.data["plan"]
        .as_array()
        .map(|a| a.iter().filter_map(Json::as_i64).collect())
        .unwrap_or_default();
    let mut history = c.data["history"].as_array().cloned().unwrap_or_default();
    history.push(json!([c.gate, step, c.processor]));
    let data = json!({"plan": plan, "step": step + 1, "history": history, "by": c.processor});
    let body = match usize::try_from(step) {
        Ok(s) if s + 1 < plan.len() => json!({"gate": plan[s + 1], "done": false, "data": data}),
        Ok(s) if s + 1 == plan.len() => json!({"done": true, "data": data}),
        _ => {
            json!({"error": {"message": format!("step {step} is not in the plan"), "no_retry": true}})
        }
    };
    recs.lock().push(Rec {
        call: c,
        step,
        hold: false,
        end: Instant::now(),
        owner,
    });
    reply(200, body)
}

/// (id, status, owner) of every partition.
pub async fn partitions(db: &TestDb) -> Vec<(String, String, Option<String>)> {
    let sql = "SELECT id, status, owner FROM feed_partitions";
    db.rows(sql, &["id", "status", "owner"]).await
}

/// (session id, pid) of every session row.
pub async fn sessions(db: &TestDb) -> Vec<(String, u32)> {
    db.query("SELECT id, pid FROM feed_processors", vec![])
        .await
        .iter()
        .map(|r| {
            let pid: i64 = r.try_get("", "pid").unwrap();
            (r.try_get("", "id").unwrap(), pid as u32)
        })
        .collect()
}

pub async fn sessions_of(db: &TestDb, pid: u32) -> HashSet<String> {
    sessions(db)
        .await
        .into_iter()
        .filter(|(_, p)| *p == pid)
        .map(|(id, _)| id)
        .collect()
}

pub async fn active_owned_by(db: &TestDb, owners: &HashSet<String>) -> HashSet<String> {
    partitions(db)
        .await
        .into_iter()
        .filter(|(_, st, o)| st == "available" && o.as_ref().is_some_and(|o| owners.contains(o)))
        .map(|(id, _, _)| id)
        .collect()
}

/// Waits until the processor `pid` has registered its session (its signal
/// handlers are installed by then: a SIGTERM before that just kills it).
pub async fn wait_registered(db: &TestDb, pid: u32) {
    crate::support::wait_for(
        "the processor's session",
        Duration::from_secs(60),
        || async { !sessions_of(db, pid).await.is_empty() },
    )
    .await;
}

/// A running processor to stop, at random among those holding partitions.
pub async fn pick_victim(db: &TestDb, alive: &[Proc]) -> usize {
    let owners: HashSet<String> = partitions(db)
        .await
        .into_iter()
        .filter(|(_, st, _)| st == "available")
        .filter_map(|(_, _, o)| o)
        .collect();
    let sessions = sessions(db).await;
    let holding: Vec<usize> = (0..alive.len())
        .filter(|i| {
            let pid = alive[*i].child.id();
            sessions
                .iter()
                .any(|(s, p)| *p == pid && owners.contains(s))
        })
        .collect();
    let mut r = rand::rng();
    match holding.choose(&mut r) {
        Some(i) => *i,
        None => r.random_range(0..alive.len()),
    }
}

/// A processor just stopped: the active partitions its sessions held, the
/// sessions, and when and how it was stopped.
pub struct Stopped {
    pub owned: HashSet<String>,
    pub gone: HashSet<String>,
    pub at: Instant,
    /// SIGKILL (its sessions must expire) rather than SIGTERM (it hands
    /// its partitions over while it drains).
    pub killed: bool,
}

impl Stopped {
    /// Waits until every partition of `owned` has an owner outside `gone`
    /// (or is no longer active); returns the time since the stop. Panics
    /// when that takes 10 s longer than the session expiry (killed) or the
    /// drain timeout (terminated).
    pub async fn takeover(&self, db: &TestDb) -> Duration {
        let (owned, gone, t0) = (&self.owned, &self.gone, self.at);
        let (bound, what) = if self.killed {
            (EXPIRY, "failover after SIGKILL")
        } else {
            (DRAIN, "handover after SIGTERM")
        };
        let bound = bound + Duration::from_secs(10);
        loop {
            let rows = partitions(db).await;
            let pending: Vec<_> = rows
                .iter()
                .filter(|(id, st, o)| {
                    owned.contains(id)
                        && st == "available"
                        && o.as_ref().is_none_or(|o| gone.contains(o))
                })
                .collect();
            if pending.is_empty() {
                return t0.elapsed();
            }
            if t0.elapsed() > bound {
                panic!(
                    "{what}: {} of {} partitions still without a new owner after {bound:?}: {:?}; sessions: {:?}",
                    pending.len(),
                    owned.len(),
                    pending.iter().take(10).collect::<Vec<_>>(),
                    sessions(db).await
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Partitions held by each running processor when the lease picture is
/// balanced: one session per running processor, every active partition
/// owned by one of them, each holding floor(P/S) to ceil(P/S). Err says why not.
pub async fn balance(db: &TestDb, running: &[u32]) -> Result<BTreeMap<String, i64>, String> {
    let live: HashMap<String, u32> = sessions(db)
        .await
        .into_iter()
        .filter(|(_, pid)| running.contains(pid))
        .collect();
    if live.len() != running.len() {
        return Err(format!(
            "{} sessions for {} running processors",
            live.len(),
            running.len()
        ));
    }
    let mut held: BTreeMap<String, i64> = live.keys().map(|s| (s.clone(), 0)).collect();
    let mut p = 0i64;
    for (id, st, owner) in partitions(db).await {
        if st != "available" {
            continue;
        }
        p += 1;
        match owner.and_then(|o| held.get_mut(&o)) {
            Some(n) => *n += 1,
            None => return Err(format!("{id} has no running owner")),
        }
    }
    let s = running.len() as i64;
    let (lo, hi) = (p / s, (p + s - 1) / s);
    if held.values().all(|n| (lo..=hi).contains(n)) {
        Ok(held)
    } else {
        Err(format!(
            "{p} partitions held {:?}, want {lo}..={hi}",
            held.values()
        ))
    }
}

/// Waits until the leases are balanced and stay so, unchanged, for 1 s
/// (5 acquire cycles); returns how long that took to begin and the counts.
pub async fn wait_balanced(db: &TestDb, running: &[u32], what: &str) -> (Duration, Vec<i64>) {
    let t0 = Instant::now();
    let mut since: Option<(Instant, BTreeMap<String, i64>)> = None;
    let mut why = String::new();
    while t0.elapsed() < Duration::from_secs(90) {
        match balance(db, running).await {
            Ok(held) => match &since {
                Some((at, prev)) if *prev == held => {
                    if at.elapsed() >= Duration::from_secs(1) {
                        return (*at - t0, held.into_values().collect());
                    }
                }
                _ => since = Some((Instant::now(), held)),
            },
            Err(e) => {
                why = e;
                since = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: leases never balanced: {why}");
}
