//! Chaos: several real `processor` processes share 128 partitions
//! whose items need several handler steps across gates 0 → 1 → 2, while the
//! test kills processors (SIGKILL), stops them (SIGTERM) and starts new ones
//! at random moments.
//!
//! What is asserted, precisely:
//! - every partition and every item ends `complete`;
//! - each item's stored data is its plan applied exactly once per step:
//!   `step` = number of planned steps and `history[i] = [gate of step i, i,
//!   processor]`, so no step was skipped or applied twice;
//! - the ledger agrees with the data: every call's `Feed-Gate` is the gate
//!   its step is planned at, and its `Idempotency-Key` is the same for every
//!   delivery of one step and differs between steps;
//! - fencing: the processor recorded for each stored step made a call for
//!   that step, and when that call was answered the database named that
//!   processor as the partition's owner (the handler reads the owner just
//!   before answering; the fenced write can only come after the answer). A
//!   write by a processor that had lost the partition would show up as a
//!   stored step whose call saw another owner; the only legitimate way to
//!   produce that picture, the same session winning the partition back in
//!   the milliseconds between the answer and its write, does not happen here;
//! - gate order: in each partition, every call at a gate above g started
//!   after the last *accepted* answer at gate g. Stale calls at gate g (from
//!   a processor that lost the partition) may start before the advance and
//!   be answered after it: they are counted, and never stored (previous point);
//! - balance: with 3 steady processors, each holds between floor(P/S) and
//!   ceil(P/S) of the P active partitions, unchanged over several acquire
//!   cycles: at the start, and again after the chaos (a new processor must
//!   steal its share, the dead sessions must drop out);
//! - each SIGKILLed processor's partitions get a new owner within the
//!   session expiry + 10 s, each SIGTERMed one's within the drain timeout +
//!   10 s, and SIGTERM exits 0.
//!
//! Reported (stderr and `$TMPDIR/feed-chaos-<backend>.json`), not asserted:
//! failover time after SIGKILL (from the kill until every partition the
//! processor held has another owner), handover time after SIGTERM (from the
//! signal until the same), and duplicate deliveries (calls beyond one per
//! step) per 1,000 steps, by cause. Calls answered 503 while the test holds
//! the work still for a balance check are attempts, not deliveries.
//!
//! `FEED_CHAOS_SECS` sets the length of the chaos phase (default 20 s).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use parking_lot::Mutex;
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::{Value as Json, json};

use crate::on_all_backends;
use crate::support::{Backend, Call, Handler, Proc, TestDb, json as reply};

on_all_backends!(many_processors);

const PARTITIONS: usize = 128;
const ITEMS: usize = 3;
/// `--session-expiry` in `support::FAST`.
const EXPIRY: Duration = Duration::from_secs(2);
/// `--drain-timeout` in `support::FAST`.
const DRAIN: Duration = Duration::from_secs(5);
/// Processors kept running in steady phases; the chaos keeps 2 to 5 alive.
const STEADY: usize = 3;
/// Few slots each, so the work outlasts the chaos and partitions move while busy.
const FLAGS: &[&str] = &["--concurrency", "4", "--max-attempts", "0"];

/// The gates of an item's steps: 1–2 steps at gate 0, 1–2 at gate 1, 1 at gate 2.
fn plan(p: usize, i: usize) -> Vec<i64> {
    let h = p * 7 + i * 3;
    let mut gates = vec![0; 1 + h % 2];
    gates.extend(std::iter::repeat_n(1, 1 + (h / 2) % 2));
    gates.push(2);
    gates
}

fn partition_id(p: usize) -> String {
    format!("p{p:03}")
}

fn item_id(p: usize, i: usize) -> String {
    format!("p{p:03}-i{i}")
}

/// One handler call, as the test's handler saw and answered it.
#[derive(Clone, Debug)]
struct Rec {
    call: Call,
    /// `step` in the data received (the step this call performs).
    step: i64,
    /// Answered 503 + `Retry-After` while the test holds the work (balance
    /// phases): an attempt, not a delivery of the step.
    hold: bool,
    /// When the answer was produced (the result is written after this).
    end: Instant,
    /// The partition's owner in the database just before answering.
    owner: Result<Option<String>, String>,
}

/// Statement with `?` placeholders, numbered for PostgreSQL.
fn stmt(b: DbBackend, sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    let mut out = String::new();
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' && b == DbBackend::Postgres {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    Statement::from_sql_and_values(b, out, values)
}

async fn owner_of(store: &feed::Store, partition: &str) -> Result<Option<String>, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let q = stmt(
            store.backend(),
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
async fn answer(
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
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "1")],
            "held",
        )
            .into_response();
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
async fn partitions(db: &TestDb) -> Vec<(String, String, Option<String>)> {
    db.query("SELECT id, status, owner FROM feed_partitions", vec![])
        .await
        .iter()
        .map(|r| {
            (
                r.try_get("", "id").unwrap(),
                r.try_get("", "status").unwrap(),
                r.try_get("", "owner").unwrap(),
            )
        })
        .collect()
}

/// (session id, pid) of every session row.
async fn sessions(db: &TestDb) -> Vec<(String, u32)> {
    db.query("SELECT id, pid FROM feed_processors", vec![])
        .await
        .iter()
        .map(|r| {
            let pid: i64 = r.try_get("", "pid").unwrap();
            (r.try_get("", "id").unwrap(), pid as u32)
        })
        .collect()
}

async fn sessions_of(db: &TestDb, pid: u32) -> HashSet<String> {
    sessions(db)
        .await
        .into_iter()
        .filter(|(_, p)| *p == pid)
        .map(|(id, _)| id)
        .collect()
}

async fn active_owned_by(db: &TestDb, owners: &HashSet<String>) -> HashSet<String> {
    partitions(db)
        .await
        .into_iter()
        .filter(|(_, st, o)| st == "available" && o.as_ref().is_some_and(|o| owners.contains(o)))
        .map(|(id, _, _)| id)
        .collect()
}

/// Waits until the processor `pid` has registered its session (its signal
/// handlers are installed by then: a SIGTERM before that just kills it).
async fn wait_registered(db: &TestDb, pid: u32) {
    crate::support::wait_for(
        "the processor's session",
        Duration::from_secs(60),
        || async { !sessions_of(db, pid).await.is_empty() },
    )
    .await;
}

/// A running processor to stop, at random among those holding partitions.
async fn pick_victim(db: &TestDb, alive: &[Proc]) -> usize {
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

/// Waits until every partition of `owned` has an owner outside `gone` (or
/// is no longer active); returns the time since `t0`. Panics after `bound`.
async fn takeover(
    db: &TestDb,
    owned: &HashSet<String>,
    gone: &HashSet<String>,
    t0: Instant,
    bound: Duration,
    what: &str,
) -> Duration {
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

/// Partitions held by each running processor when the lease picture is
/// balanced: one session per running processor, every active partition
/// owned by one of them, each holding floor(P/S) to ceil(P/S). Err says why not.
async fn balance(db: &TestDb, running: &[u32]) -> Result<BTreeMap<String, i64>, String> {
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
async fn wait_balanced(db: &TestDb, running: &[u32], what: &str) -> (Duration, Vec<i64>) {
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

fn stats(xs: &[f64]) -> Json {
    if xs.is_empty() {
        return json!({"n": 0});
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"n": v.len(), "median": median, "min": v[0], "max": v[v.len() - 1], "all": v})
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    Kill,
    Term,
    Start,
}

async fn many_processors(b: Backend) {
    let Some(db) = TestDb::new(b).await else {
        return;
    };
    let name = match b {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
        Backend::Mysql => "mariadb",
    };
    let chaos_for = Duration::from_secs(
        std::env::var("FEED_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let began = Instant::now();

    let hold = Arc::new(AtomicBool::new(true));
    let recs: Arc<Mutex<Vec<Rec>>> = Arc::default();
    let hstore = feed::Store::connect(&db.url, 4).await.unwrap();
    let h = {
        let (hold, recs) = (hold.clone(), recs.clone());
        Handler::start_async(move |c| answer(c, hold.clone(), recs.clone(), hstore.clone())).await
    };
    let url = h.url();

    // ---- Balance: 3 processors, 128 partitions held still (503 + Retry-After). ----
    let mut alive: Vec<Proc> = (0..STEADY).map(|_| Proc::start(&db, &url, FLAGS)).collect();
    let mut dead: Vec<Proc> = Vec::new();
    let pids = |alive: &[Proc]| alive.iter().map(|p| p.child.id()).collect::<Vec<_>>();
    crate::support::wait_for("3 sessions", Duration::from_secs(60), || async {
        sessions(&db).await.len() == STEADY
    })
    .await;
    let mut plans: HashMap<String, (String, Vec<i64>)> = HashMap::new();
    for p in 0..PARTITIONS {
        let items = (0..ITEMS)
            .map(|i| {
                let gates = plan(p, i);
                plans.insert(item_id(p, i), (partition_id(p), gates.clone()));
                feed::store::NewItem {
                    id: Some(item_id(p, i)),
                    gate: Some(0),
                    data: serde_json::to_vec(&json!({"plan": gates, "step": 0, "history": []}))
                        .unwrap(),
                }
            })
            .collect();
        db.store
            .enqueue(&partition_id(p), &Default::default(), items)
            .await
            .unwrap();
    }
    let steps: usize = plans.values().map(|(_, g)| g.len()).sum();
    let (converged_start, held_start) = wait_balanced(&db, &pids(&alive), "start").await;
    eprintln!("[{name}] balanced at start in {converged_start:?}: {held_start:?} of {PARTITIONS}");

    // ---- Chaos. ----
    hold.store(false, Ordering::SeqCst);
    let chaos_start = Instant::now();
    let mut failovers: Vec<f64> = Vec::new();
    let mut handovers: Vec<f64> = Vec::new();
    let mut exits: Vec<f64> = Vec::new();
    let mut log: Vec<Json> = Vec::new();
    let mut deck: Vec<Action> = Vec::new();
    let mut all_complete = false;
    let mut killed: HashSet<String> = HashSet::new();
    while chaos_start.elapsed() < chaos_for {
        let pause = rand::rng().random_range(300..2000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if partitions(&db)
            .await
            .iter()
            .all(|(_, st, _)| st == "complete")
        {
            all_complete = true;
            break;
        }
        if deck.is_empty() {
            deck = vec![Action::Kill, Action::Term, Action::Start, Action::Start];
            deck.shuffle(&mut rand::rng());
        }
        let mut action = deck.pop().unwrap();
        if alive.len() <= 2 && action != Action::Start {
            // Keep two alive: start one now, stop one later.
            deck.push(action);
            action = Action::Start;
        } else if alive.len() >= 5 && action == Action::Start {
            continue;
        }
        let at = chaos_start.elapsed().as_secs_f64();
        match action {
            Action::Start => {
                alive.push(Proc::start(&db, &url, FLAGS));
                log.push(json!({"at": at, "action": "start", "alive": alive.len()}));
            }
            Action::Kill => {
                let mut victim = alive.remove(pick_victim(&db, &alive).await);
                let gone = sessions_of(&db, victim.child.id()).await;
                killed.extend(gone.iter().cloned());
                let t0 = Instant::now();
                victim.child.kill().unwrap();
                victim.child.wait().unwrap();
                let owned = active_owned_by(&db, &gone).await;
                dead.push(victim);
                let took = takeover(
                    &db,
                    &owned,
                    &gone,
                    t0,
                    EXPIRY + Duration::from_secs(10),
                    "failover after SIGKILL",
                )
                .await;
                if !owned.is_empty() {
                    failovers.push(took.as_secs_f64());
                }
                log.push(json!({"at": at, "action": "SIGKILL", "partitions": owned.len(), "failover_s": took.as_secs_f64(), "alive": alive.len()}));
            }
            Action::Term => {
                let mut victim = alive.remove(pick_victim(&db, &alive).await);
                wait_registered(&db, victim.child.id()).await;
                let gone = sessions_of(&db, victim.child.id()).await;
                let owned = active_owned_by(&db, &gone).await;
                let t0 = Instant::now();
                let stopping = tokio::task::spawn_blocking(move || {
                    let status = victim.terminate();
                    (victim, status, t0.elapsed())
                });
                let took = takeover(
                    &db,
                    &owned,
                    &gone,
                    t0,
                    DRAIN + Duration::from_secs(10),
                    "handover after SIGTERM",
                )
                .await;
                let (victim, status, exited) = stopping.await.unwrap();
                assert!(
                    status.success(),
                    "SIGTERM exit status {status:?}:\n{}",
                    victim.log()
                );
                dead.push(victim);
                if !owned.is_empty() {
                    handovers.push(took.as_secs_f64());
                }
                exits.push(exited.as_secs_f64());
                log.push(json!({"at": at, "action": "SIGTERM", "partitions": owned.len(), "handover_s": took.as_secs_f64(), "exit_s": exited.as_secs_f64(), "alive": alive.len()}));
            }
        }
        eprintln!("[{name}] {}", log.last().unwrap());
    }
    let chaos_took = chaos_start.elapsed();
    let complete_after_chaos = partitions(&db)
        .await
        .iter()
        .filter(|(_, st, _)| st == "complete")
        .count();
    eprintln!(
        "[{name}] chaos for {chaos_took:?}: {complete_after_chaos}/{PARTITIONS} partitions complete{}",
        if all_complete {
            " (work finished early)"
        } else {
            ""
        }
    );
    assert!(
        !failovers.is_empty() && !handovers.is_empty(),
        "the chaos must include a SIGKILL and a SIGTERM of a processor holding partitions: {log:?}"
    );

    // ---- Balance again with 3 steady processors, the rest held still. ----
    while alive.len() < STEADY {
        alive.push(Proc::start(&db, &url, FLAGS));
    }
    while alive.len() > STEADY {
        let mut p = alive.pop().unwrap();
        wait_registered(&db, p.child.id()).await;
        assert!(p.terminate().success(), "SIGTERM exit status:\n{}", p.log());
        dead.push(p);
    }
    hold.store(true, Ordering::SeqCst);
    let remaining = PARTITIONS - complete_after_chaos;
    let balance_after = if remaining >= STEADY {
        let (took, held) = wait_balanced(&db, &pids(&alive), "after the chaos").await;
        eprintln!("[{name}] balanced after the chaos in {took:?}: {held:?}");
        Some((took, held))
    } else {
        eprintln!("[{name}] too few partitions left to check balance after the chaos");
        None
    };
    hold.store(false, Ordering::SeqCst);

    // ---- Let the rest finish. ----
    crate::support::wait_for(
        "every partition complete",
        Duration::from_secs(120),
        || async {
            partitions(&db)
                .await
                .iter()
                .all(|(_, st, _)| st == "complete")
        },
    )
    .await;
    for mut p in alive.drain(..) {
        assert!(p.terminate().success(), "SIGTERM exit status:\n{}", p.log());
        dead.push(p);
    }

    // ---- The database's final state. ----
    for (id, st, owner) in partitions(&db).await {
        assert_eq!((st.as_str(), owner), ("complete", None), "partition {id}");
    }
    let data_col = if b == Backend::Sqlite {
        "CAST(data AS BLOB)"
    } else {
        "data"
    };
    let rows = db
        .query(
            &format!("SELECT id, partition_id, status, gate, {data_col} AS data FROM feed_items"),
            vec![],
        )
        .await;
    assert_eq!(rows.len(), PARTITIONS * ITEMS);
    let mut stored: HashMap<String, Json> = HashMap::new();
    for r in &rows {
        let id: String = r.try_get("", "id").unwrap();
        let status: String = r.try_get("", "status").unwrap();
        let gate: i64 = r.try_get("", "gate").unwrap();
        let bytes: Vec<u8> = r.try_get("", "data").unwrap();
        let data: Json = serde_json::from_slice(&bytes).unwrap();
        let (_, gates) = &plans[&id];
        assert_eq!(
            (status.as_str(), gate),
            ("complete", 2),
            "item {id}: {data}"
        );
        assert_eq!(
            data["step"],
            json!(gates.len()),
            "item {id}: step counter: {data}"
        );
        let history = data["history"].as_array().unwrap();
        assert_eq!(history.len(), gates.len(), "item {id}: history: {data}");
        for (i, (e, g)) in history.iter().zip(gates).enumerate() {
            assert_eq!(
                (&e[0], &e[1]),
                (&json!(g), &json!(i)),
                "item {id}: step {i}: {data}"
            );
        }
        assert_eq!(data["by"], history.last().unwrap()[2], "item {id}: {data}");
        assert_eq!(data["plan"], json!(gates), "item {id}: {data}");
        stored.insert(id, data);
    }

    // ---- The ledger against the data. ----
    let recs = recs.lock().clone();
    let mut keys: HashMap<(&str, i64), HashSet<&str>> = HashMap::new();
    let mut by_step: HashMap<(&str, i64), Vec<usize>> = HashMap::new();
    for (n, r) in recs.iter().enumerate() {
        let c = &r.call;
        let (partition, gates) = plans
            .get(&c.item)
            .unwrap_or_else(|| panic!("call for an unknown item: {c:?}"));
        assert_eq!(&c.partition, partition, "call {c:?}");
        let planned = usize::try_from(r.step).ok().and_then(|s| gates.get(s));
        assert_eq!(
            planned,
            Some(&c.gate),
            "call at a gate its step is not planned at: {c:?}"
        );
        assert_eq!(
            c.data["history"].as_array().map(Vec::len),
            Some(r.step as usize),
            "call with inconsistent data: {c:?}"
        );
        keys.entry((&c.item, r.step))
            .or_default()
            .insert(&c.idempotency_key);
        if !r.hold {
            by_step.entry((&c.item, r.step)).or_default().push(n);
        }
    }
    let mut seen_keys: HashMap<&str, (&str, i64)> = HashMap::new();
    for ((item, step), ks) in &keys {
        assert_eq!(ks.len(), 1, "{item} step {step}: idempotency keys {ks:?}");
        let k = ks.iter().next().unwrap();
        if let Some(other) = seen_keys.insert(k, (item, *step)) {
            panic!(
                "idempotency key {k} used for {other:?} and {:?}",
                (item, step)
            );
        }
    }

    // Fencing: every stored step comes from a call answered while its
    // processor owned the partition. `accepted` = the end of that call.
    let owner_was =
        |r: &Rec, who: &str| r.owner.as_ref().ok().and_then(Option::as_deref) == Some(who);
    let mut accepted: HashMap<(&str, i64), Instant> = HashMap::new();
    let mut accepted_calls: HashSet<usize> = HashSet::new();
    for (id, data) in &stored {
        for (i, e) in data["history"].as_array().unwrap().iter().enumerate() {
            let who = e[2].as_str().unwrap();
            let calls = by_step
                .get(&(id.as_str(), i as i64))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let mine: Vec<usize> = calls
                .iter()
                .copied()
                .filter(|n| recs[*n].call.processor == who)
                .collect();
            assert!(
                !mine.is_empty(),
                "item {id} step {i} stored from {who}, which made no call for it: {:?}",
                calls.iter().map(|n| &recs[*n]).collect::<Vec<_>>()
            );
            let owned: Vec<usize> = mine
                .iter()
                .copied()
                .filter(|n| owner_was(&recs[*n], who))
                .collect();
            assert!(
                !owned.is_empty(),
                "item {id} step {i} stored from {who}, but the partition's owner when it was answered was {:?} (a stale write)",
                mine.iter().map(|n| &recs[*n].owner).collect::<Vec<_>>()
            );
            let first = *owned.iter().min_by_key(|n| recs[**n].end).unwrap();
            accepted.insert((id.as_str(), i as i64), recs[first].end);
            accepted_calls.insert(first);
        }
    }

    // Gate order per partition: every call at a gate above g started after
    // the last accepted answer at gate g.
    let mut last_accepted: HashMap<(&str, i64), Instant> = HashMap::new();
    for ((item, step), end) in &accepted {
        let (partition, gates) = &plans[*item];
        let g = gates[*step as usize];
        let e = last_accepted.entry((partition.as_str(), g)).or_insert(*end);
        *e = (*e).max(*end);
    }
    let mut late_stale = 0;
    for r in &recs {
        let c = &r.call;
        for g in 0..c.gate {
            if let Some(end) = last_accepted.get(&(c.partition.as_str(), g)) {
                assert!(
                    c.at > *end,
                    "partition {}: a call at gate {} ({}, step {}) started before the last accepted answer at gate {g}",
                    c.partition,
                    c.gate,
                    c.item,
                    r.step
                );
            }
        }
    }
    // Stale calls at gate g answered after the partition moved past g.
    let mut first_above: HashMap<(&str, i64), Instant> = HashMap::new();
    for r in &recs {
        for g in 0..r.call.gate {
            let e = first_above
                .entry((r.call.partition.as_str(), g))
                .or_insert(r.call.at);
            *e = (*e).min(r.call.at);
        }
    }
    for r in recs.iter().filter(|r| !r.hold) {
        if let Some(t) = first_above.get(&(r.call.partition.as_str(), r.call.gate))
            && r.end > *t
        {
            late_stale += 1;
        }
    }

    // ---- Figures. ----
    let deliveries = recs.iter().filter(|r| !r.hold).count();
    assert!(deliveries >= steps);
    let duplicates = deliveries - steps;
    // Why the extra deliveries were not stored.
    // `moved_late`: the owner was still the caller when it answered, yet
    // the write was rejected: the partition moved between the answer and
    // the write (or the caller's session lapsed meanwhile).
    let (mut lost, mut crashed, mut moved_late) = (0, 0, 0);
    for (n, r) in recs.iter().enumerate() {
        if r.hold || accepted_calls.contains(&n) {
            continue;
        }
        if !owner_was(r, &r.call.processor) {
            lost += 1;
        } else if killed.contains(&r.call.processor) {
            crashed += 1;
        } else {
            moved_late += 1;
        }
    }
    let per_1000 = duplicates as f64 * 1000.0 / steps as f64;
    let report = json!({
        "backend": name,
        "partitions": PARTITIONS,
        "items": PARTITIONS * ITEMS,
        "steps": steps,
        "deliveries": deliveries,
        "held_attempts": recs.len() - deliveries,
        "duplicates": duplicates,
        "duplicates_per_1000_steps": per_1000,
        "duplicates_by_cause": {
            "partition_moved_before_answer": lost,
            "processor_killed_in_flight": crashed,
            "partition_moved_after_answer": moved_late,
        },
        "stale_calls_answered_after_advance": late_stale,
        "failover_after_sigkill_s": stats(&failovers),
        "handover_after_sigterm_s": stats(&handovers),
        "sigterm_exit_s": stats(&exits),
        "balance_start": {"converged_s": converged_start.as_secs_f64(), "held": held_start},
        "balance_after_chaos": balance_after.map(|(t, h)| json!({"converged_s": t.as_secs_f64(), "held": h})),
        "chaos_s": chaos_took.as_secs_f64(),
        "partitions_complete_after_chaos": complete_after_chaos,
        "events": log,
        "processes": dead.len(),
        "total_s": began.elapsed().as_secs_f64(),
    });
    let path = std::env::temp_dir().join(format!("feed-chaos-{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
    eprintln!(
        "[{name}] failover after SIGKILL {}; handover after SIGTERM {}; {duplicates} duplicate deliveries in {steps} steps = {per_1000:.1} per 1,000 ({}); report {}",
        report["failover_after_sigkill_s"],
        report["handover_after_sigterm_s"],
        report["duplicates_by_cause"],
        path.display()
    );
}
