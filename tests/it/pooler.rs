//! Feed through PgBouncer (Debian's, 1.18), in session mode and in
//! transaction mode (`--db-pooler transaction`): producers and processors
//! share a few server connections, and every partition completes.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use testkit::Handler;

use crate::cli::processor;
use crate::support::{Proc, TestDb, done, numbered, wait_for};

/// A PgBouncer in front of the test server, on a port of its own.
struct PgBouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PgBouncer {
    /// Starts one in `mode` with `servers` server connections per database;
    /// None (skip) outside CI when pgbouncer is not installed.
    async fn start(mode: &str, servers: u32) -> Option<PgBouncer> {
        let bin = Path::new("/usr/sbin/pgbouncer");
        if !bin.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "pgbouncer is missing (apt-get install pgbouncer)"
            );
            eprintln!("skipped: pgbouncer is not installed (apt-get install pgbouncer)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // PgBouncer refuses to run as root: it runs as postgres, which
        // must read its files.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let port = testkit::free_port();
        std::fs::write(d.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port=5432\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {users}\npool_mode = {mode}\n\
             default_pool_size = {servers}\nmax_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             logfile = {log}\npidfile = {pid}\n",
            users = d.join("users.txt").display(),
            log = d.join("pgbouncer.log").display(),
            pid = d.join("pgbouncer.pid").display(),
        );
        std::fs::write(d.join("pgbouncer.ini"), ini).unwrap();
        let mut cmd = Command::new(bin);
        if nix_is_root() {
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd.arg("-q").arg(d.join("pgbouncer.ini")).spawn().unwrap();
        let bouncer = PgBouncer {
            child,
            port,
            _dir: dir,
        };
        wait_for("pgbouncer to listen", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Some(bouncer)
    }

    /// Clients that logged in so far.
    fn clients(&self) -> usize {
        std::fs::read_to_string(self._dir.path().join("pgbouncer.log"))
            .unwrap_or_default()
            .matches("login attempt")
            .count()
    }

    /// `db`'s URL through this pooler.
    fn url(&self, db: &TestDb) -> String {
        let name = db.url.rsplit('/').next().unwrap();
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

#[allow(unsafe_code)] // sound for the reason beside the call
fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Enqueues through the pooler with the CLI, runs two processors through
/// it, and checks every item completed once with one attempt.
async fn drains_through(mode: &str, servers: u32, flags: &[&str]) {
    let Some(db) = TestDb::new(testkit::Backend::Postgres).await else {
        return;
    };
    let Some(bouncer) = PgBouncer::start(mode, servers).await else {
        return;
    };
    let url = bouncer.url(&db);
    let mut all = Vec::new();
    for p in 0..8 {
        let ids = numbered(&format!("p{p}-"), 25);
        let lines: String = ids
            .iter()
            .map(|id| format!("{{\"id\": \"{id}\", \"gate\": {}, \"data\": 1}}\n", p % 2))
            .collect();
        let mut args = vec!["enqueue", "--database-url", &url];
        args.extend(flags);
        let partition = format!("p{p}");
        args.extend(["--partition", &partition]);
        let o = processor(&args, &lines);
        assert!(o.status.success(), "{}", crate::cli::text(&o));
        all.extend(ids);
    }
    // Items at gate 1 of the odd partitions wait for none; the even ones
    // hold gate 0 items only.
    let handler = Handler::start(|_| done()).await;
    let through = TestDb::alias(&db, &url);
    let mut args = vec!["--concurrency", "8"];
    args.extend(flags);
    let a = Proc::start(&through, &handler.url(), &args);
    let b = Proc::start(&through, &handler.url(), &args);
    db.wait_complete(all.len() as i64).await;
    for row in db.item_rows(&all).await {
        assert_eq!((row.status.as_str(), row.attempts), ("complete", 1));
    }
    // A partition closes in the gate check after its last item's result.
    for p in 0..8 {
        db.wait_partition(&format!("p{p}"), "complete").await;
    }
    // Every enqueue and both processors logged in through the pooler;
    // in transaction mode, more clients than servers shared them.
    let least = if mode == "transaction" {
        servers as usize + 1
    } else {
        10
    };
    assert!(
        bouncer.clients() >= least,
        "{} clients logged in through the pooler, expected at least {least}",
        bouncer.clients()
    );
    let mut args = vec!["status", "--json", "--database-url", &url];
    args.extend(flags);
    let o = processor(&args, "");
    assert!(o.status.success(), "{}", crate::cli::text(&o));
    for p in [&a, &b] {
        let log = p.log();
        assert!(
            !log.contains("prepared statement") && !log.contains("ERROR"),
            "{}",
            crate::support::tail(&log, 20)
        );
    }
}

#[tokio::test]
async fn feed_works_through_pgbouncer_in_session_mode() {
    drains_through("session", 40, &[]).await;
}

#[tokio::test]
async fn feed_works_through_pgbouncer_in_transaction_mode() {
    // Two server connections for two processors and the CLI: every
    // client's statements land on servers other clients used.
    drains_through("transaction", 2, &["--db-pooler", "transaction"]).await;
}

#[tokio::test]
async fn the_transaction_pooler_setting_is_for_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/f.db?mode=rwc", dir.path().display());
    let o = processor(
        &[
            "status",
            "--database-url",
            &url,
            "--db-pooler",
            "transaction",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(2), "{}", crate::cli::text(&o));
    assert!(
        crate::cli::text(&o).contains("--db-pooler transaction is for PostgreSQL"),
        "{}",
        crate::cli::text(&o)
    );
}
