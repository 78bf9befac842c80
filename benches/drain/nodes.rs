//! CPU of each database node during a drain: the plain PostgreSQL server,
//! or the Citus coordinator and each worker apart, read from /proc.
//!
//! A node's CPU is that of its postmaster's process tree. Its backends
//! come and go (one per connection), and one that exits takes its own
//! times with it, so the tree's live processes at the start and the end
//! are not enough: a node's ticks are the postmaster's utime + stime +
//! cutime + cstime (cutime and cstime: the children that exited and were
//! waited for, their own children included) plus, for every live
//! descendant, the same four fields; and a drain's figure is the
//! difference between its end and its start. Everything the server does
//! is in it: its other databases, autovacuum, the checkpointer, and the
//! benchmark's own polling; client connections to other databases at the
//! drain's start or end are counted and said (another test or benchmark
//! on the same server).
//!
//! The postmaster is found from the server itself: the parent of the
//! backend serving a connection (`pg_backend_pid()`), on the coordinator
//! through the drain's pool and on each Citus worker (`pg_dist_node`)
//! through a connection of its own to the drain's database there, open
//! while the drain runs. A server in another PID namespace (a container) or
//! on another machine is left out, with a warning.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use serde::Serialize;
use testkit::Backend;

use crate::cpu::clk_tck;
use crate::fixture::Db;

/// A database node: its postmaster, and the connection it is asked through.
struct Node {
    /// `db` (plain PostgreSQL), `coord`, or `w<port>` (a Citus worker).
    label: String,
    pid: u32,
    /// A connection of its own to a Citus worker; None: the drain's pool.
    conn: Option<DatabaseConnection>,
}

/// One node's CPU over a drain.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct NodeCpu {
    /// `db` (plain PostgreSQL), `coord`, or `w<port>` (a Citus worker).
    pub(crate) node: String,
    /// Its postmaster.
    pub(crate) pid: u32,
    /// CPU seconds of its process tree (exited children included).
    pub(crate) cpu_s: f64,
    /// Client connections to other databases of the node, the more of the
    /// drain's start and end (None: not known): another test or benchmark
    /// beside this one, whose work is in `cpu_s`.
    pub(crate) other_connections: Option<i64>,
}

/// Client connections to other databases than the one asked from.
const OTHERS: &str = "SELECT COUNT(*) FROM pg_stat_activity \
     WHERE backend_type = 'client backend' AND datname IS DISTINCT FROM current_database()";

/// The nodes of a drain's database, watched from its start.
pub(crate) struct Watch {
    nodes: Vec<Node>,
    others: Vec<Option<i64>>,
    ticks: Vec<u64>,
}

impl Watch {
    /// Finds `db`'s PostgreSQL nodes (none for SQLite and MariaDB; a node
    /// that cannot be found on this machine is left out, saying why) and
    /// takes their ticks.
    pub(crate) async fn start(db: &Db) -> Watch {
        let nodes = match find(db).await {
            Ok(nodes) => nodes,
            Err(e) => {
                eprintln!("  warning: no CPU figures for the database nodes: {e:#}");
                Vec::new()
            }
        };
        let others = others(db, &nodes).await;
        let ticks = snap(&nodes);
        Watch {
            nodes,
            others,
            ticks,
        }
    }

    /// Each node's CPU since [`Watch::start`].
    pub(crate) async fn finish(self, db: &Db) -> Vec<NodeCpu> {
        let ticks = snap(&self.nodes);
        let others = others(db, &self.nodes).await;
        let t = clk_tck();
        let mut out = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.into_iter().enumerate() {
            if let Some(c) = n.conn {
                let _ = c.close().await;
            }
            out.push(NodeCpu {
                node: n.label,
                pid: n.pid,
                cpu_s: ticks[i].saturating_sub(self.ticks[i]) as f64 / t,
                other_connections: self.others[i].max(others[i]),
            });
        }
        out
    }
}

/// `sql` (one integer) on `node`.
async fn ask(db: &Db, node: Option<&DatabaseConnection>, sql: &str) -> Result<i64> {
    let q = Statement::from_string(DbBackend::Postgres, format!("SELECT ({sql})::BIGINT AS n"));
    let rows = node
        .unwrap_or_else(|| db.store.connection())
        .query_all_raw(q)
        .await
        .with_context(|| sql.to_string())?;
    Ok(rows.first().context("no row")?.try_get("", "n")?)
}

/// `db`'s own node (`db`, or the Citus coordinator) and each Citus worker,
/// through a connection of its own to the drain's database there.
async fn find(db: &Db) -> Result<Vec<Node>> {
    let own = match db.backend {
        Backend::Postgres => "db",
        Backend::Citus => "coord",
        _ => return Ok(Vec::new()),
    };
    let mut nodes = vec![Node {
        label: own.into(),
        pid: 0,
        conn: None,
    }];
    if db.backend == Backend::Citus {
        let rows = db
            .query(
                "SELECT nodename, nodeport::BIGINT AS port FROM pg_dist_node \
                 WHERE groupid <> 0 AND isactive AND noderole = 'primary' ORDER BY nodeport",
                vec![],
            )
            .await?;
        for row in rows {
            let host: String = row.try_get("", "nodename")?;
            let port: i64 = row.try_get("", "port")?;
            let mut url = url::Url::parse(&db.url)?;
            url.set_host(Some(&host))?;
            url.set_port(u16::try_from(port).ok())
                .map_err(|()| anyhow::anyhow!("no port in {}", db.url))?;
            let opts = ConnectOptions::new(url.to_string())
                .max_connections(1)
                .min_connections(1)
                .to_owned();
            let conn = tokio::time::timeout(Duration::from_secs(15), Database::connect(opts))
                .await
                .map_err(|_| anyhow::anyhow!("connecting to worker {host}:{port} timed out"))?
                .with_context(|| format!("connecting to worker {host}:{port}"))?;
            nodes.push(Node {
                label: format!("w{port}"),
                pid: 0,
                conn: Some(conn),
            });
        }
    }
    // The postmaster is the parent of the backend serving the connection,
    // read while the connection is open.
    for n in &mut nodes {
        let backend = ask(db, n.conn.as_ref(), "SELECT pg_backend_pid()").await?;
        n.pid = postmaster_of(backend).with_context(|| format!("node {}", n.label))?;
    }
    Ok(nodes)
}

/// Each node's [`OTHERS`], in the order of `nodes`.
async fn others(db: &Db, nodes: &[Node]) -> Vec<Option<i64>> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        out.push(ask(db, n.conn.as_ref(), OTHERS).await.ok());
    }
    out
}

/// The postmaster of the backend `backend`: its parent, both `postgres`
/// processes on this machine.
fn postmaster_of(backend: i64) -> Result<u32> {
    let stat = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse(&s))
    };
    let Some(b) = stat(backend).filter(|b| b.comm == "postgres") else {
        bail!("backend {backend} is not a postgres process here (another machine or container?)");
    };
    match stat(b.ppid.into()) {
        Some(p) if p.comm == "postgres" => Ok(b.ppid),
        _ => bail!(
            "the parent {} of backend {backend} is not a postgres process",
            b.ppid
        ),
    }
}

/// What a /proc/<pid>/stat line tells of a process.
struct Stat {
    comm: String,
    ppid: u32,
    /// utime + stime + cutime + cstime.
    ticks: u64,
}

fn parse(stat: &str) -> Option<Stat> {
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i)?.parse::<u64>().ok();
    // After the command: state, ppid, …, utime (11), stime, cutime, cstime.
    let ticks = field(11)? + field(12)? + field(13)? + field(14)?;
    Some(Stat {
        comm,
        ppid: f.get(1)?.parse().ok()?,
        ticks,
    })
}

/// Cumulative ticks of each node's process tree, in the order of `nodes`.
/// One pass over /proc in PID order, so a postmaster is mostly read before
/// its children: a backend that exits between the two reads is then lost
/// (its few ticks) rather than counted twice.
fn snap(nodes: &[Node]) -> Vec<u64> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut procs: HashMap<u32, (u32, u64)> = HashMap::with_capacity(pids.len());
    for pid in pids {
        if let Some(s) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse(&s))
        {
            procs.insert(pid, (s.ppid, s.ticks));
        }
    }
    nodes
        .iter()
        .map(|n| {
            procs
                .iter()
                .filter(|&(&pid, _)| descends(&procs, pid, n.pid))
                .map(|(_, &(_, t))| t)
                .sum()
        })
        .collect()
}

/// Whether `pid` is `root` or one of its descendants.
fn descends(procs: &HashMap<u32, (u32, u64)>, mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match procs.get(&pid) {
            Some(&(ppid, _)) if ppid != 0 && ppid != pid => pid = ppid,
            _ => return false,
        }
    }
    false
}
