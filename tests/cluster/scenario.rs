//! One failover under load: a fresh database on the cluster, a workload,
//! a real handler that answers `done` in about 20 ms and keeps every
//! call, two processors at their default flags, the failover at about a
//! quarter of the calls, then the checks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use sea_orm::sqlx::{self, Row};
use testkit::{Handler, Process, json};

use crate::patroni::{Cluster, connect};

/// Partitions of one gate, and items in each.
const PARTITIONS: usize = 80;
const ITEMS: usize = 50;
/// Partitions whose items run at gate 0, move to gate 1, and run again.
const TWO_GATE: usize = 4;
const TWO_GATE_ITEMS: usize = 10;
/// How long the handler takes to answer.
const ANSWER: Duration = Duration::from_millis(20);
/// Calls in flight per processor: the work lasts a few seconds, so the
/// failover, started at a quarter of the calls, lands in its middle.
const CONCURRENCY: &str = "16";
/// The most warnings and errors a processor may log from the failover to
/// the end, at its default log levels.
const MAX_LOG_LINES: usize = 60;
/// Results a processor may hold at once (`--concurrency` × 4 in flight):
/// a failover can cost at most these, its answers in flight, as
/// duplicate deliveries.
const IN_FLIGHT: usize = 16 * 4;
/// The longest resume allowed after the route serves a primary again.
const MAX_RESUME: Duration = Duration::from_secs(20);

/// A call's number and when it came.
type Called = (u64, Instant);

/// Every handler call: (item, gate) → its calls.
#[derive(Default)]
pub struct Ledger {
    next: AtomicU64,
    calls: Mutex<HashMap<(String, i64), Vec<Called>>>,
}

impl Ledger {
    fn total(&self) -> usize {
        self.calls.lock().values().map(Vec::len).sum()
    }
}

/// Calls expected: one per item and gate.
fn expected_calls() -> usize {
    PARTITIONS * ITEMS + TWO_GATE * TWO_GATE_ITEMS * 2
}

/// What a failover did, for the report.
pub struct Measured {
    /// From the failover's start until the route served a primary again.
    pub route_back: Duration,
    /// From then until the first result stored.
    pub resume: Duration,
    /// The longest time no result was stored, around the failover.
    pub write_gap: Duration,
    /// Handler calls beyond one per (item, gate).
    pub duplicates: usize,
    /// When the first calls of the items called again were made: before
    /// the failover, during it, after the route came back.
    pub duplicated_when: [usize; 3],
    /// Log lines from the failover to the end, per processor.
    pub log_lines: Vec<usize>,
    /// Statements a second per processor from the failover until the
    /// first result after it.
    pub statements: Vec<f64>,
    pub extra: String,
}

/// How processors reach the database, and what the failover does.
pub struct Plan {
    pub name: &'static str,
    /// The processors' flags beyond `--concurrency`.
    pub args: &'static [&'static str],
    pub url: fn(&Cluster, &str) -> String,
    /// Runs the failover; returns when the processors' route serves a
    /// primary again, and anything worth reporting.
    pub failover:
        for<'a> fn(&'a Cluster, &'a str) -> futures_util::future::BoxFuture<'a, (Instant, String)>,
}

fn epoch_ms(t: Instant) -> i64 {
    let ago = Instant::now().saturating_duration_since(t);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.saturating_sub(ago)).as_millis() as i64
}

/// Creates the database on the leader, migrates it and writes the work.
async fn prepare(cluster: &Cluster, db: &str) {
    let leader = cluster.leader().await;
    cluster
        .sql(&leader, "postgres", &format!("CREATE DATABASE {db}"))
        .await
        .expect("create the database");
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{db}",
        cluster.port(&leader)
    );
    let store = feed::Store::connect(&url, 2)
        .await
        .expect("open the database");
    store.migrate().await.expect("migrate");
    let mut c = connect(cluster.port(&leader), db).await.unwrap();
    let mut sql = String::from("INSERT INTO feed_partitions (id) VALUES ");
    let parts: Vec<String> = (0..PARTITIONS)
        .map(|p| format!("('p{p}')"))
        .chain((0..TWO_GATE).map(|p| format!("('two{p}')")))
        .collect();
    sql.push_str(&parts.join(", "));
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for p in 0..PARTITIONS {
        rows.extend((0..ITEMS).map(|i| format!("('p{p}-{i}', 'p{p}', 0, '\\x7b7d')")));
    }
    for p in 0..TWO_GATE {
        rows.extend((0..TWO_GATE_ITEMS).map(|i| format!("('two{p}-{i}', 'two{p}', 0, '\\x7b7d')")));
    }
    let sql = format!(
        "INSERT INTO feed_items (id, partition_id, gate, data) VALUES {}",
        rows.join(", ")
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
}

/// The handler: about 20 ms, then `done` (gate 0 of a two-gate partition:
/// on to gate 1), with the call's number as the item's new data.
async fn handler(ledger: Arc<Ledger>) -> Handler {
    Handler::start_async(move |call| {
        let ledger = ledger.clone();
        async move {
            tokio::time::sleep(ANSWER).await;
            let n = ledger.next.fetch_add(1, Ordering::SeqCst);
            ledger
                .calls
                .lock()
                .entry((call.item.clone(), call.gate))
                .or_default()
                .push((n, Instant::now()));
            let data = serde_json::json!({ "call": n });
            if call.partition.starts_with("two") && call.gate == 0 {
                json(
                    200,
                    serde_json::json!({ "gate": 1, "done": false, "data": data }),
                )
            } else {
                json(200, serde_json::json!({ "done": true, "data": data }))
            }
        }
    })
    .await
}

/// Lines logged as warnings or errors.
fn alarms(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .count()
}

fn statements(metrics: &str) -> f64 {
    testkit::metric(metrics, "feed_statements_total")
}

/// Runs one plan; panics with what went wrong.
pub async fn run(cluster: &Cluster, plan: &Plan) -> Measured {
    let db = format!(
        "feed_cluster_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    prepare(cluster, &db).await;
    let ledger = Arc::new(Ledger::default());
    let handler = handler(ledger.clone()).await;
    let url = (plan.url)(cluster, &db);
    let args: Vec<&str> = ["--concurrency", CONCURRENCY]
        .into_iter()
        .chain(plan.args.iter().copied())
        .collect();
    let mut procs: Vec<Process> = (0..2)
        .map(|_| {
            Process::spawn(
                env!("CARGO_BIN_EXE_processor"),
                &url,
                &handler.url(),
                &args,
                None,
            )
            .expect("spawn a processor")
        })
        .collect();
    let client = reqwest::Client::new();

    // The failover at about a quarter of the calls.
    let quarter = expected_calls() / 4;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ledger.total() < quarter {
        assert!(
            Instant::now() < deadline,
            "no progress before the failover: {} calls\n{}",
            ledger.total(),
            procs[0].log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lines_before: Vec<usize> = procs.iter().map(|p| alarms(&p.log())).collect();
    let mut stmts_before = Vec::new();
    for p in &procs {
        stmts_before.push(statements(&p.metrics(&client).await));
    }
    let started = Instant::now();
    let (back, extra) = (plan.failover)(cluster, &db).await;
    let back_ms = epoch_ms(back);

    // Everything completes; results are read on the leader.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut sampled = None;
    loop {
        let leader = cluster.leader().await;
        let open = cluster
            .count(
                cluster.port(&leader),
                &db,
                "SELECT COUNT(*) FROM feed_partitions WHERE status <> 'complete'",
            )
            .await;
        if sampled.is_none() {
            let first = cluster
                .count(
                    cluster.port(&leader),
                    &db,
                    &format!("SELECT COUNT(*) FROM feed_items WHERE updated_at >= {back_ms} AND version > 0"),
                )
                .await;
            if first.is_ok_and(|n| n > 0) {
                let mut s = Vec::new();
                for p in &procs {
                    s.push(statements(&p.metrics(&client).await));
                }
                sampled = Some((s, started.elapsed().as_secs_f64()));
            }
        }
        if open.is_ok_and(|n| n == 0) {
            break;
        }
        for p in &mut procs {
            if let Err(e) = p.check_alive() {
                panic!("{e}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: not complete 120 s after the failover\n{}\n---- processor 2\n{}",
            plan.name,
            procs[0].log_tail(30),
            procs[1].log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log_lines: Vec<usize> = procs
        .iter()
        .zip(&lines_before)
        .map(|(p, before)| alarms(&p.log()) - before)
        .collect();
    let logs: Vec<String> = procs.iter().map(|p| p.log()).collect();
    // FEED_CLUSTER_LOGS=<dir> keeps the processors' logs for a look.
    if let Some(dir) = std::env::var_os("FEED_CLUSTER_LOGS") {
        for (i, log) in logs.iter().enumerate() {
            let file = std::path::Path::new(&dir).join(format!("{}-{i}.log", plan.name));
            std::fs::write(file, log).unwrap();
        }
    }
    for p in &mut procs {
        assert!(
            p.stop(Duration::from_secs(40)).await,
            "a processor did not stop on SIGTERM"
        );
        let status = p.child.wait().unwrap();
        assert!(status.success(), "a processor exited with {status}");
    }
    let measured = check(cluster, plan, &db, &ledger, back_ms, started, back).await;
    let statements = match sampled {
        Some((after, secs)) => after
            .iter()
            .zip(&stmts_before)
            .map(|(a, b)| ((a - b) / secs).round())
            .collect(),
        None => vec![],
    };
    for (lines, log) in log_lines.iter().zip(&logs) {
        assert!(
            *lines <= MAX_LOG_LINES,
            "{}: {lines} log lines after the failover\n{}",
            plan.name,
            log.lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let leader = cluster.leader().await;
    let _ = cluster
        .sql(
            &leader,
            "postgres",
            &format!("DROP DATABASE {db} WITH (FORCE)"),
        )
        .await;
    Measured {
        log_lines,
        statements,
        extra,
        ..measured
    }
}

/// The checks on the stored items against the handler's view.
async fn check(
    cluster: &Cluster,
    plan: &Plan,
    db: &str,
    ledger: &Ledger,
    back_ms: i64,
    started: Instant,
    back: Instant,
) -> Measured {
    let leader = cluster.leader().await;
    let mut c = connect(cluster.port(&leader), db).await.unwrap();
    let rows = sqlx::query(
        "SELECT id, partition_id, gate, status, attempts, last_error, version, convert_from(data, 'UTF8') AS data, updated_at FROM feed_items",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let calls = ledger.calls.lock().clone();
    assert_eq!(rows.len(), PARTITIONS * ITEMS + TWO_GATE * TWO_GATE_ITEMS);
    let mut stored: Vec<i64> = Vec::new();
    let mut problems = Vec::new();
    for r in &rows {
        let id: String = r.get("id");
        let partition: String = r.get("partition_id");
        let gate: i64 = r.get("gate");
        let status: String = r.get("status");
        let attempts: i32 = r.get("attempts");
        let last_error: Option<String> = r.get("last_error");
        let version: i64 = r.get("version");
        let data: String = r.get("data");
        stored.push(r.get("updated_at"));
        let gates = if partition.starts_with("two") { 2 } else { 1 };
        if status != "complete" || attempts != 1 || last_error.is_some() {
            problems.push(format!(
                "{id}: {status}, {attempts} attempts, {last_error:?}"
            ));
        }
        // Applied once per gate: each applied result bumps the version.
        if version != gates {
            problems.push(format!("{id}: version {version}, {gates} results expected"));
        }
        // The stored result is one the handler gave for its last gate.
        let n = serde_json::from_str::<serde_json::Value>(&data)
            .ok()
            .and_then(|v| v["call"].as_u64());
        let given: Vec<u64> = calls
            .get(&(id.clone(), gate))
            .map(|v| v.iter().map(|c| c.0).collect())
            .unwrap_or_default();
        if !n.is_some_and(|n| given.contains(&n)) {
            problems.push(format!(
                "{id}: stored {data}, the handler answered calls {given:?} at gate {gate}"
            ));
        }
        for g in 0..gates {
            if !calls.contains_key(&(id.clone(), g)) {
                problems.push(format!("{id}: never called at gate {g}"));
            }
        }
    }
    let open = cluster
        .count(
            cluster.port(&leader),
            db,
            "SELECT COUNT(*) FROM feed_partitions WHERE status <> 'complete'",
        )
        .await
        .unwrap();
    assert_eq!(open, 0, "every partition complete");
    assert!(
        problems.is_empty(),
        "{}: {} items wrong, e.g.\n{}",
        plan.name,
        problems.len(),
        problems[..problems.len().min(20)].join("\n")
    );
    stored.sort_unstable();
    let first = *stored
        .iter()
        .find(|&&t| t >= back_ms)
        .expect("a result after the failover");
    let resume = Duration::from_millis((first - back_ms).max(0) as u64);
    let from = epoch_ms(started) - 1000;
    let write_gap = stored
        .windows(2)
        .filter(|w| w[1] >= from && w[0] <= first)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0);
    assert!(
        resume <= MAX_RESUME,
        "{}: the first result came {resume:?} after the route served a primary again",
        plan.name
    );
    let duplicates = calls.values().map(|v| v.len() - 1).sum();
    assert!(
        duplicates <= 2 * IN_FLIGHT,
        "{}: {duplicates} duplicate deliveries, more than the answers two processors hold",
        plan.name
    );
    Measured {
        route_back: back - started,
        resume,
        write_gap: Duration::from_millis(write_gap as u64),
        duplicates,
        duplicated_when: calls
            .values()
            .filter(|v| v.len() > 1)
            .fold([0; 3], |mut n, v| {
                let first = v[0].1;
                n[usize::from(first >= started) + usize::from(first >= back)] += 1;
                n
            }),
        log_lines: vec![],
        statements: vec![],
        extra: String::new(),
    }
}
