//! Mistakes at start (the book: Troubleshooting, The database) and exit
//! codes: a database that cannot be used as the URL says ends the command
//! within seconds with one line saying what to do; one that may come up
//! later is waited for, and the log says why; every command says which
//! database it opened; a panicking task and a taken `--listen` address end
//! the processor with a non-zero status.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Backend, Reserved, TestDb, wait_for};
use crate::{backend_tests, on_all_backends};

/// How long a command that must give up may take before the test says it
/// hangs (the statement is "within seconds": a few, not minutes).
const GIVES_UP_WITHIN: Duration = Duration::from_secs(15);

/// `processor args…` with `env` and none of this environment's `FEED_*`
/// variables, run in `dir`; its stderr is kept in a file.
struct Run {
    child: Child,
    stderr: tempfile::NamedTempFile,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, &str)], dir: Option<&std::path::Path>) -> Run {
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_processor"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr.reopen().unwrap());
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str()
                && (k.starts_with("FEED_") || k == "RUST_LOG" || k == "RUST_BACKTRACE")
            {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        Run {
            child: cmd.spawn().unwrap(),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    /// The exit status, waiting up to `bound`; None (and the process is
    /// killed) when it is still running then.
    async fn exited(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Asserts that the process exits non-zero within [`GIVES_UP_WITHIN`]
    /// with exactly one `error:` line, which says each of `says`; returns that line.
    async fn gives_up(&mut self, says: &[&str]) -> String {
        let status = self.exited(GIVES_UP_WITHIN).await;
        let err = self.stderr();
        let status = status.unwrap_or_else(|| panic!("still running:\n{err}"));
        assert!(!status.success(), "{status}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(lines.len(), 1, "one error line:\n{err}");
        for text in says {
            assert!(lines[0].contains(text), "{text:?} not in: {}", lines[0]);
        }
        lines[0].to_string()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `processor run` against `url`, with a handler nobody needs and no listener.
fn run(url: &str, env: &[(&str, &str)]) -> Run {
    let args = [
        "run",
        "--database-url",
        url,
        "--handler-url",
        "http://127.0.0.1:9/feed",
        "--listen",
        "off",
    ];
    Run::start(&args, env, None)
}

/// The test database's URL with its path (the database's name) replaced.
fn with_database(db: &TestDb, name: &str) -> String {
    let mut u = url::Url::parse(&db.url).unwrap();
    u.set_path(&format!("/{name}"));
    u.to_string()
}

backend_tests!(a_missing_database_ends_run_with_how_to_create_it: postgres => Postgres, mariadb => Mysql);
/// A database that does not exist on the server: `run` and `status` exit
/// non-zero at once with the command that creates it; nothing is retried.
async fn a_missing_database_ends_run_with_how_to_create_it(db: TestDb) {
    let url = with_database(&db, "feed_no_such_db");
    let create = match db.backend {
        Backend::Postgres => "createdb -h 127.0.0.1 -p 5432 -U postgres feed_no_such_db",
        // No password in the URL: the client is not told to ask for one.
        _ => "mysql -h 127.0.0.1 -P 3306 -u root -e 'CREATE DATABASE feed_no_such_db'",
    };
    let says = ["\"feed_no_such_db\" does not exist", create];
    let line = run(&url, &[]).gives_up(&says).await;
    assert!(!line.contains("line 948"), "{line}");
    Run::start(&["status", "--database-url", &url], &[], None)
        .gives_up(&says)
        .await;
}

backend_tests!(a_refused_login_ends_run_with_what_to_check: postgres => Postgres, mariadb => Mysql);
/// A login the server refuses (MariaDB: a wrong password; PostgreSQL,
/// which trusts every password here: a user that does not exist) ends
/// `run` at once, saying to check the user and password, with the
/// password redacted.
async fn a_refused_login_ends_run_with_what_to_check(db: TestDb) {
    let mut u = url::Url::parse(&db.url).unwrap();
    if db.backend == Backend::Postgres {
        u.set_username("feed_no_such_user").unwrap();
    }
    u.set_password(Some("pw-s3cret")).unwrap();
    let mut p = run(u.as_str(), &[]);
    let line = p
        .gives_up(&["refused the login", "check the user and password"])
        .await;
    assert!(!p.stderr().contains("pw-s3cret"), "{}", p.stderr());
    assert!(line.contains(":***@"), "{line}");
}

#[tokio::test]
/// An SQLite file that cannot be created (its directory is missing) or
/// that does not exist without `?mode=rwc` ends `run` at once with what to
/// do; nothing is created.
async fn an_sqlite_file_that_cannot_be_opened_ends_run_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let url = format!("sqlite://{}/feed.db?mode=rwc", missing.display());
    let directory = format!("the directory {} does not exist", missing.display());
    run(&url, &[]).gives_up(&[&directory, "mkdir"]).await;

    let url = format!("sqlite://{}/new.db", dir.path().display());
    let with_mode = format!("({url}?mode=rwc)");
    run(&url, &[])
        .gives_up(&["add ?mode=rwc", &with_mode])
        .await;
    assert!(!missing.exists() && !dir.path().join("new.db").exists());
}

#[tokio::test]
/// MySQL/MariaDB take one host: a list ends `run` at once with what to put
/// in front of the cluster instead.
async fn a_mariadb_host_list_ends_run_with_what_to_use() {
    let url = "mysql://root@127.0.0.1:3306,127.0.0.2:3306/db";
    run(url, &[]).gives_up(&["one host per URL", "proxy"]).await;
}

backend_tests!(a_postgres_host_list_is_tried_in_order: postgres => Postgres);
/// libpq's list of hosts: while no host answers, `run` waits and says what
/// each host said (the password hidden), a few times, not in a hot loop;
/// a host that refuses connections is passed over for the next one, by a
/// command that writes (`migrate`) and by one that reads (`status`).
async fn a_postgres_host_list_is_tried_in_order(db: TestDb) {
    let (a, b) = (Reserved::new(), Reserved::new());
    let u = url::Url::parse(&db.url).unwrap();
    let (path, port) = (u.path(), u.port().unwrap());
    let none = format!(
        "postgres://postgres:pw-s3cret@127.0.0.1:{},127.0.0.1:{}{path}?target_session_attrs=read-write",
        a.port(),
        b.port()
    );
    let mut p = run(&none, &[]);
    let each = [
        format!(
            "127.0.0.1:{}: error communicating with database: Connection refused",
            a.port()
        ),
        format!(
            "127.0.0.1:{}: error communicating with database: Connection refused",
            b.port()
        ),
    ];
    wait_for("two retries said", Duration::from_secs(30), || async {
        p.stderr()
            .matches("no host of the list takes writes")
            .count()
            >= 2
    })
    .await;
    let log = p.stderr();
    for said in &each {
        assert!(log.contains(said.as_str()), "{said:?} not in:\n{log}");
    }
    assert!(
        !log.contains("pw-s3cret") && log.contains("postgres:***@127.0.0.1"),
        "{log}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lines = p.stderr().lines().count();
    assert!(lines <= 8, "{lines} lines in 2 s and more:\n{}", p.stderr());
    assert!(p.exited(Duration::ZERO).await.is_none(), "still retrying");

    let second = format!(
        "postgres://postgres:pw@127.0.0.1:{},127.0.0.1:{port}{path}",
        a.port()
    );
    for command in ["migrate", "status"] {
        let mut c = Run::start(&[command, "--database-url", &second], &[], None);
        let status = c.exited(GIVES_UP_WITHIN).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "{command}: {status:?}\n{}",
            c.stderr()
        );
        let opened = format!(
            "database: postgres://postgres:***@127.0.0.1:{},127.0.0.1:{port}{path}",
            a.port()
        );
        assert!(c.stderr().contains(&opened), "{command}: {}", c.stderr());
    }
}

backend_tests!(a_refused_port_is_waited_for_and_said: postgres => Postgres, mariadb => Mysql);
/// Nothing listens at the database's port: `run` keeps retrying (it may
/// come up) and logs "connection refused at host:port" with the password
/// redacted, a few times, not in a hot loop.
async fn a_refused_port_is_waited_for_and_said(db: TestDb) {
    let port = Reserved::new();
    let mut u = url::Url::parse(&db.url).unwrap();
    u.set_port(Some(port.port())).unwrap();
    u.set_password(Some("pw-s3cret")).unwrap();
    let mut p = run(u.as_str(), &[("RUST_LOG", "info")]);
    let refused = format!("connection refused at 127.0.0.1:{}", port.port());
    wait_for(
        "three retries said as refusals",
        Duration::from_secs(30),
        || async { p.stderr().matches(refused.as_str()).count() >= 3 },
    )
    .await;
    assert!(p.exited(Duration::ZERO).await.is_none(), "still retrying");
    // Retries back off (0.25–0.5 s, then twice that each time): two more
    // seconds add two or three lines, where a hot loop would add hundreds.
    let before = p.stderr().matches(refused.as_str()).count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = p.stderr();
    let after = log.matches(refused.as_str()).count();
    assert!(after <= before + 3, "{before} then {after} lines:\n{log}");
    assert!(p.exited(Duration::ZERO).await.is_none(), "still retrying");
    assert!(!log.contains("pw-s3cret"), "{log}");
    assert!(!log.contains("pool timed out"), "{log}");
}

on_all_backends!(commands_say_which_database_they_opened);
/// `status` (and every other command) says on stderr which database it
/// opened, an SQLite file as an absolute path; `--json` output stays JSON.
async fn commands_say_which_database_they_opened(db: TestDb) {
    let (url, dir, expected) = match db.backend {
        Backend::Sqlite => {
            let path = std::path::PathBuf::from(
                db.url
                    .trim_start_matches("sqlite://")
                    .split('?')
                    .next()
                    .unwrap(),
            );
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let dir = path.parent().unwrap().to_path_buf();
            let shown = format!("database: sqlite://{}", path.display());
            (format!("sqlite://{name}"), Some(dir), shown)
        }
        _ => (db.url.clone(), None, format!("database: {}", db.url)),
    };
    let o = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["status", "--database-url", &url, "--json"])
        .current_dir(dir.unwrap_or_else(std::env::temp_dir))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&expected), "{expected} not in: {err}");
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(json["partitions"].is_array(), "{json}");
}

#[tokio::test]
/// `status` in a folder without a database says so and creates none.
async fn status_in_a_folder_without_a_database_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().join("feed.db");
    Run::start(&["status"], &[], Some(dir.path()))
        .gives_up(&[&here.display().to_string(), "--database-url"])
        .await;
    assert!(!here.exists(), "no empty database left behind");
}

on_all_backends!(a_panicking_task_ends_the_processor_non_zero);
/// A task that panics (the dispatch loop, or the session keeper, made to
/// by the `FEED_TEST_PANIC_TASK` hook) ends the processor with status 1
/// after the usual shutdown: its session is handed over.
async fn a_panicking_task_ends_the_processor_non_zero(db: TestDb) {
    for task in ["dispatch", "keeper"] {
        let mut p = run(&db.url, &[("FEED_TEST_PANIC_TASK", task)]);
        let panicked = format!("the {task} task panicked");
        let line = p.gives_up(&[&panicked]).await;
        assert!(line.contains("FEED_TEST_PANIC_TASK"), "{line}");
        assert_eq!(p.child.wait().unwrap().code(), Some(1));
        assert!(p.stderr().contains("processor stopped"), "{}", p.stderr());
        assert!(db.sessions().await.is_empty(), "the session was deleted");
    }
}

on_all_backends!(a_taken_listen_address_is_said_once);
/// `--listen` on an address another process holds: exit non-zero at once,
/// one line that says "Address already in use" once and names `--listen`
/// and `--listen off`.
async fn a_taken_listen_address_is_said_once(db: TestDb) {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let args = [
        "run",
        "--database-url",
        &db.url,
        "--handler-url",
        "http://127.0.0.1:9/feed",
        "--listen",
        &addr,
    ];
    let mut p = Run::start(&args, &[], None);
    let line = p.gives_up(&[&addr, "--listen off"]).await;
    assert_eq!(line.matches("in use").count(), 1, "{line}");
    assert_eq!(p.stderr().matches("in use").count(), 1, "{}", p.stderr());
    assert!(line.contains("give --listen"), "{line}");
}

#[tokio::test]
/// A proxy that accepts connections and closes them at once (HAProxy with
/// no primary behind it): `run` waits and says the connection was closed,
/// not that TLS failed.
async fn a_proxy_with_no_server_behind_it_is_said_as_such() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/feed");
    let mut p = run(&url, &[("RUST_LOG", "info")]);
    let closed = format!("127.0.0.1:{port} closed the connection as soon as it was opened");
    wait_for(
        "the closed connection said",
        Duration::from_secs(20),
        || async { p.stderr().contains(closed.as_str()) },
    )
    .await;
    assert!(p.exited(Duration::ZERO).await.is_none(), "still retrying");
    assert!(!p.stderr().contains("SSLRequest"), "{}", p.stderr());
    proxy.abort();
}

backend_tests!(run_on_a_standby_waits_for_the_primary: postgres => Postgres);
/// A server that takes no writes (a standby): `run` does not start there,
/// it waits and says why, within seconds; then starts once it takes writes.
async fn run_on_a_standby_waits_for_the_primary(db: TestDb) {
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let admin = |on: bool| {
        let sql = if on {
            format!("ALTER DATABASE {name} SET default_transaction_read_only = on")
        } else {
            format!("ALTER DATABASE {name} RESET default_transaction_read_only")
        };
        async move {
            let url = testkit::Servers::default()
                .admin(testkit::Backend::Postgres)
                .unwrap()
                .unwrap();
            let conn = sea_orm::Database::connect(url).await.unwrap();
            sea_orm::ConnectionTrait::execute_unprepared(&conn, &sql)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
    };
    admin(true).await;
    let mut p = run(&db.url, &[("RUST_LOG", "info")]);
    wait_for("the standby said", GIVES_UP_WITHIN, || async {
        p.stderr()
            .contains("takes no writes (a standby or a demoted primary)")
    })
    .await;
    assert!(p.exited(Duration::ZERO).await.is_none(), "still waiting");
    admin(false).await;
    wait_for(
        "a session once writes are taken",
        Duration::from_secs(60),
        || async { !db.sessions().await.is_empty() },
    )
    .await;
}
