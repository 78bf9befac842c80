//! The cluster under test: `contrib/cluster/cluster.sh` started on free
//! loopback ports with its data in a directory of its own under /tmp,
//! stopped (replicas first) and removed when dropped, also when a
//! scenario failed.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use sea_orm::sqlx::{self, Connection, PgConnection};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/cluster/cluster.sh");

/// Where each part listens; `PG + i` and `REST + i` for node `pg{i+1}`,
/// `HAPROXY` (sessions shut down at mark-down) and `HAPROXY + 1` (sessions kept).
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub pg: u16,
    pub rest: u16,
    pub haproxy: u16,
    pub etcd: u16,
}

impl Ports {
    fn all(self) -> Vec<u16> {
        let mut v = vec![self.haproxy, self.haproxy + 1, self.etcd, self.etcd + 1];
        v.extend((0..3).map(|i| self.pg + i));
        v.extend((0..3).map(|i| self.rest + i));
        v
    }

    /// The documented ports, or the first block 100 above them that is
    /// free (another run, another service).
    fn free() -> Ports {
        for k in 0..30u16 {
            let p = Ports {
                pg: 15432 + 100 * k,
                rest: 18008 + 100 * k,
                haproxy: 15000 + 100 * k,
                etcd: 12379 + 100 * k,
            };
            if p.all()
                .iter()
                .all(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
            {
                return p;
            }
        }
        panic!("no free block of ports for the cluster");
    }
}

/// What is missing to run the cluster, as the script says; None when all is there.
pub fn missing() -> Option<String> {
    let out = Command::new(SCRIPT).arg("check").output().ok()?;
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A running cluster, stopped and removed when dropped.
pub struct Cluster {
    pub dir: PathBuf,
    pub ports: Ports,
}

impl Cluster {
    /// Bootstraps etcd, three Patroni nodes and HAProxy (about 20 s).
    pub fn start() -> Cluster {
        let dir = std::path::Path::new("/tmp")
            .join(format!("feed-cluster-{}", uuid::Uuid::new_v4().simple()));
        let cluster = Cluster {
            dir,
            ports: Ports::free(),
        };
        let out = cluster
            .command(&["start"])
            .output()
            .expect("run cluster.sh");
        if !out.status.success() {
            panic!(
                "the cluster did not start: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                cluster.logs()
            );
        }
        cluster
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(SCRIPT);
        c.arg(args[0]).arg(&self.dir).args(&args[1..]);
        c.env("PG_PORT", self.ports.pg.to_string())
            .env("REST_PORT", self.ports.rest.to_string())
            .env("HAPROXY_PORT", self.ports.haproxy.to_string())
            .env("ETCD_PORT", self.ports.etcd.to_string());
        c
    }

    /// Runs a subcommand of the script (off the runtime's threads); its stdout.
    pub async fn script(&self, args: &[&str]) -> String {
        let mut c = tokio::process::Command::from(self.command(args));
        let out = c.output().await.expect("run cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The tails of the cluster's logs, for a failure.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for f in [
            "etcd.log",
            "pg1.patroni.log",
            "pg2.patroni.log",
            "pg3.patroni.log",
            "switchover.log",
        ] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            out.push_str(&format!("---- {f}\n{tail}\n"));
        }
        out
    }

    /// The leader's name (`pg1`…).
    pub async fn leader(&self) -> String {
        self.script(&["leader"]).await
    }

    /// Waits until a leader takes writes beside two streaming replicas.
    pub async fn wait_healthy(&self) {
        self.script(&["wait", "180"]).await;
    }

    /// A node's PostgreSQL port.
    pub fn port(&self, node: &str) -> u16 {
        let i: u16 = node[2..].parse().expect("a node name");
        self.ports.pg + i - 1
    }

    /// A database's URL through HAProxy: sessions shut down when their
    /// node is marked down (`cut`), or kept (`keep`).
    pub fn haproxy_url(&self, db: &str, keep: bool) -> String {
        let port = self.ports.haproxy + u16::from(keep);
        format!("postgres://postgres@127.0.0.1:{port}/{db}")
    }

    /// A database's multi-host URL naming the three nodes.
    pub fn hosts_url(&self, db: &str) -> String {
        let p = self.ports.pg;
        format!(
            "postgres://postgres:secret@127.0.0.1:{p},127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            p + 1,
            p + 2
        )
    }

    /// A command on HAProxy's admin socket.
    pub async fn haproxy(&self, cmd: &str) -> String {
        self.script(&["haproxy", cmd]).await
    }

    /// Routes the sessions-kept frontend to `node` only, whatever its
    /// health check says (new connections keep landing there after it is
    /// demoted), or back to the primary (`None`), leaving the sessions open.
    pub async fn pin(&self, node: Option<&str>) {
        for n in ["pg1", "pg2", "pg3"] {
            let cmd = match node {
                Some(p) if p == n => format!("disable health keep/{n}"),
                Some(_) => format!("set server keep/{n} state maint"),
                None => format!("enable health keep/{n}"),
            };
            self.haproxy(&cmd).await;
            if node.is_none() {
                self.haproxy(&format!("set server keep/{n} state ready"))
                    .await;
            }
        }
    }

    /// Runs `sql` on a node's `db`, as postgres.
    pub async fn sql(&self, node: &str, db: &str, sql: &str) -> Result<(), sqlx::Error> {
        let mut c = connect(self.port(node), db).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut c)
            .await?;
        c.close().await
    }

    /// Runs `sql` on a node as soon as it answers (it may be restarting),
    /// trying for 30 s.
    pub async fn sql_soon(&self, node: &str, sql: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = self.sql(node, "postgres", sql).await {
            assert!(Instant::now() < deadline, "{sql} on {node}: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The number a query's first column gives on a node.
    pub async fn count(&self, port: u16, db: &str, sql: &str) -> Result<i64, sqlx::Error> {
        let mut c = connect(port, db).await?;
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&mut c)
            .await?;
        c.close().await?;
        Ok(n)
    }

    /// Waits until a new connection to `port` lands on a server that takes
    /// writes other than the one listening on `old` (a node's port); when
    /// it did.
    pub async fn wait_primary(&self, port: u16, old: u16) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(90);
        let sql = "SELECT CASE WHEN current_setting('transaction_read_only') = 'off' \
                   THEN inet_server_port() ELSE 0 END::bigint";
        loop {
            let at = self.count(port, "postgres", sql).await;
            if at.is_ok_and(|p| p != 0 && p != i64::from(old)) {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "port {port} never served a new primary\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A connection to `db` on a port, within a second.
pub async fn connect(port: u16, db: &str) -> Result<PgConnection, sqlx::Error> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/{db}");
    match tokio::time::timeout(Duration::from_secs(2), PgConnection::connect(&url)).await {
        Ok(c) => c,
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let started = Instant::now();
        if let Some(keep) = std::env::var_os("FEED_CLUSTER_LOGS") {
            for f in [
                "pg1.patroni.log",
                "pg2.patroni.log",
                "pg3.patroni.log",
                "etcd.log",
            ] {
                let _ = std::fs::copy(self.dir.join(f), std::path::Path::new(&keep).join(f));
            }
        }
        let out = self.command(&["stop"]).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("cluster.sh stop failed: {out:?}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        eprintln!("cluster stopped in {:.1?}", started.elapsed());
    }
}
