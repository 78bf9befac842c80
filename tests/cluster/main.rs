//! Failovers of a real PostgreSQL cluster under load: three PostgreSQL 15
//! nodes managed by Patroni with etcd, HAProxy in front
//! (`contrib/cluster/cluster.sh`), two processors, a real handler. One
//! cluster serves every scenario in turn (its bootstrap takes about 20 s),
//! so this target has its own `main`: it takes libtest's name filters,
//! `--exact` and `--list`, runs only in the slow tier (`--ignored`), and skips (outside CI) when Patroni, etcd or
//! HAProxy is not installed; in CI (`CI=true`) that fails instead.
//!
//! Each scenario checks that every partition completes, no item fails or
//! has an attempt counted because of the database, no result is applied
//! twice or differs from what the handler answered, the first result after
//! the failover comes within a bound, and the processors log a bounded
//! number of lines; it prints the resume time and the duplicate deliveries.

mod patroni;
mod scenario;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use patroni::Cluster;
use scenario::{Measured, Plan};

/// Through HAProxy, sessions shut down at mark-down.
fn cut(c: &Cluster, db: &str) -> String {
    c.haproxy_url(db, false)
}

/// Through HAProxy, sessions kept.
fn keep(c: &Cluster, db: &str) -> String {
    c.haproxy_url(db, true)
}

/// The three nodes in one libpq multi-host URL, no HAProxy.
fn hosts(c: &Cluster, db: &str) -> String {
    c.hosts_url(db)
}

/// `patronictl switchover`; back when HAProxy routes to the new primary.
fn switchover<'a>(c: &'a Cluster, _db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.port(&c.leader().await);
        let (_, back) = tokio::join!(
            c.script(&["switchover"]),
            c.wait_primary(c.ports.haproxy, old)
        );
        (back, String::new())
    }
    .boxed()
}

/// SIGKILL of the primary's postmaster; back when HAProxy routes to the
/// new primary.
fn kill<'a>(c: &'a Cluster, _db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.leader().await;
        let (_, back) = tokio::join!(
            c.script(&["kill"]),
            c.wait_primary(c.ports.haproxy, c.port(&old))
        );
        (back, format!("killed {old}"))
    }
    .boxed()
}

/// When a node other than `old` first takes writes.
async fn new_primary(c: &Cluster, old: &str) -> Instant {
    let others: Vec<u16> = ["pg1", "pg2", "pg3"]
        .into_iter()
        .filter(|n| *n != old)
        .map(|n| c.port(n))
        .collect();
    let old = c.port(old);
    tokio::select! {
        t = c.wait_primary(others[0], old) => t,
        t = c.wait_primary(others[1], old) => t,
    }
}

/// The number of a processor's sessions open on a node's database.
async fn sessions_on(c: &Cluster, node: &str, db: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{db}' AND application_name = 'feed-processor'"
    );
    c.count(c.port(node), "postgres", &sql).await.unwrap_or(-1)
}

/// The primary turns read-only in place with its sessions open (the
/// processors' pooled connections now refuse writes), and stays the
/// sessions-kept frontend's only route for 2 s; then a switchover, new
/// connections still routed onto the demoted node for 1 s, then to the
/// new primary without closing what is open: about 10 s without writes,
/// which the processors ride out with `--session-expiry 30s`.
fn stranded<'a>(c: &'a Cluster, db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.leader().await;
        c.pin(Some(&old)).await;
        let ro = "ALTER SYSTEM SET default_transaction_read_only = on";
        c.sql(&old, "postgres", ro).await.unwrap();
        c.sql(&old, "postgres", "SELECT pg_reload_conf()").await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let open = sessions_on(c, &old, db).await;
        c.script(&["switchover"]).await;
        // Back as it was (the node is a standby now; its sessions read).
        for sql in [
            "ALTER SYSTEM RESET default_transaction_read_only",
            "SELECT pg_reload_conf()",
        ] {
            c.sql_soon(&old, sql).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let demoted = sessions_on(c, &old, db).await;
        c.pin(None).await;
        let back = c.wait_primary(c.ports.haproxy + 1, c.port(&old)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = sessions_on(c, &old, db).await;
        let said = format!(
            "sessions on {old} read-only {open}, demoted {demoted}, 3 s after the route moved {after}"
        );
        (back, said)
    }
    .boxed()
}

/// Aurora-style: after the switchover the demoted primary stays the only
/// route for 8 s (reachable, read-only), then traffic moves to the new
/// primary without closing sessions. With the switchover itself, longer
/// than the session expiry (10 s): the leases are lost.
fn reader_kept<'a>(c: &'a Cluster, db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.leader().await;
        c.pin(Some(&old)).await;
        c.script(&["switchover"]).await;
        tokio::time::sleep(Duration::from_secs(8)).await;
        let demoted = sessions_on(c, &old, db).await;
        c.pin(None).await;
        let back = c.wait_primary(c.ports.haproxy + 1, c.port(&old)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = sessions_on(c, &old, db).await;
        let said =
            format!("sessions on {old} demoted {demoted}, 3 s after the route moved {after}");
        (back, said)
    }
    .boxed()
}

/// A switchover seen through the multi-host URL: the old primary comes
/// back as a standby at its address.
fn hosts_switchover<'a>(c: &'a Cluster, _db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.leader().await;
        let (_, back) = tokio::join!(c.script(&["switchover"]), new_primary(c, &old));
        (back, String::new())
    }
    .boxed()
}

/// A killed primary seen through the multi-host URL.
fn hosts_kill<'a>(c: &'a Cluster, _db: &'a str) -> BoxFuture<'a, (Instant, String)> {
    async move {
        let old = c.leader().await;
        let (_, back) = tokio::join!(c.script(&["kill"]), new_primary(c, &old));
        (back, format!("killed {old}"))
    }
    .boxed()
}

const PLANS: &[Plan] = &[
    Plan {
        name: "switchover",
        args: &[],
        url: cut,
        failover: switchover,
    },
    Plan {
        name: "killed_primary",
        args: &[],
        url: cut,
        failover: kill,
    },
    Plan {
        name: "stranded_on_demoted_primary",
        args: &["--session-expiry", "30s"],
        url: keep,
        failover: stranded,
    },
    Plan {
        name: "reader_kept_reachable",
        args: &[],
        url: keep,
        failover: reader_kept,
    },
    Plan {
        name: "multi_host_switchover",
        args: &[],
        url: hosts,
        failover: hosts_switchover,
    },
    Plan {
        name: "multi_host_killed_primary",
        args: &[],
        url: hosts,
        failover: hosts_kill,
    },
];

/// The scenarios libtest's arguments select, and whether to only list them.
fn chosen() -> (Vec<&'static Plan>, bool, bool) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut filters, mut skips) = (Vec::new(), Vec::new());
    let (mut list, mut exact, mut slow) = (false, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => list = true,
            "--exact" => exact = true,
            "--ignored" | "--include-ignored" => slow = true,
            "--skip" => skips.extend(it.next().cloned()),
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" => {
                it.next();
            }
            a if a.starts_with('-') => {}
            a => filters.push(a.to_string()),
        }
    }
    let name = |p: &Plan| format!("cluster::{}", p.name);
    let matches = |f: &String, n: &str| {
        if exact {
            n == f
        } else {
            n.contains(f.as_str())
        }
    };
    let plans = PLANS
        .iter()
        .filter(|p| filters.is_empty() || filters.iter().any(|f| matches(f, &name(p))))
        .filter(|p| !skips.iter().any(|s| matches(s, &name(p))))
        .collect();
    (plans, list, slow)
}

fn main() -> ExitCode {
    let (plans, list, slow) = chosen();
    if list {
        for p in &plans {
            println!("cluster::{}: test", p.name);
        }
        return ExitCode::SUCCESS;
    }
    if !slow {
        // The slow tier: a cluster takes minutes to bootstrap and fail over.
        println!(
            "running 0 tests; {} ignored (the slow tier: cargo test --workspace --tests -- --ignored)",
            plans.len()
        );
        return ExitCode::SUCCESS;
    }
    if plans.is_empty() {
        println!("running 0 tests");
        return ExitCode::SUCCESS;
    }
    if let Some(missing) = patroni::missing() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        let say = format!(
            "the cluster tests need Patroni, etcd and HAProxy ({missing}): apt-get install -y patroni etcd-server etcd-client haproxy python3-etcd"
        );
        if ci {
            eprintln!("{say}");
            return ExitCode::FAILURE;
        }
        println!("skipping the cluster tests: {say}");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let failed = runtime.block_on(run_all(plans));
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the plans on one cluster; the number that failed.
async fn run_all(plans: Vec<&'static Plan>) -> usize {
    println!("running {} tests", plans.len());
    let started = Instant::now();
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    println!(
        "cluster up in {:.1?} ({:?})",
        started.elapsed(),
        cluster.ports
    );
    let mut results: Vec<(&str, Result<Measured, String>)> = Vec::new();
    for plan in plans {
        let c = cluster.clone();
        let took = Instant::now();
        let ran = tokio::spawn(async move {
            c.wait_healthy().await;
            scenario::run(&c, plan).await
        })
        .await;
        let ran = ran.map_err(|e| match e.try_into_panic() {
            Ok(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".into()),
            Err(e) => e.to_string(),
        });
        match &ran {
            Ok(m) => println!(
                "test cluster::{} ... ok ({:.1?}): route back after {:.1?}, first result {:.2?} later, \
                 longest write gap {:.2?}, {} duplicate deliveries (first calls before/during/after {:?}), log lines {:?}, statements/s until resume {:?}; {}",
                plan.name,
                took.elapsed(),
                m.route_back,
                m.resume,
                m.write_gap,
                m.duplicates,
                m.duplicated_when,
                m.log_lines,
                m.statements,
                m.extra
            ),
            Err(e) => println!(
                "test cluster::{} ... FAILED ({:.1?})\n{e}",
                plan.name,
                took.elapsed()
            ),
        }
        // Whatever a failed scenario left, the next starts from a primary
        // routed by both frontends.
        cluster.pin(None).await;
        for node in ["pg1", "pg2", "pg3"] {
            cluster
                .sql_soon(node, "ALTER SYSTEM RESET default_transaction_read_only")
                .await;
            cluster.sql_soon(node, "SELECT pg_reload_conf()").await;
        }
        results.push((plan.name, ran));
    }
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    println!(
        "\ntest result: {}. {} passed; {failed} failed; finished in {:.1?}",
        if failed == 0 { "ok" } else { "FAILED" },
        results.len() - failed,
        started.elapsed()
    );
    tokio::task::block_in_place(|| drop(cluster));
    failed
}
