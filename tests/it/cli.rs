//! The commands besides `run` (the book: Producing work): enqueue, status, retry, demo,
//! and what the command line does with bad input and secrets.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Backend, Handler, Proc, Spawned, TestDb, done, json as reply, metric, no_retry, numbered,
    signed, wait_for,
};
use crate::{backend_tests, behaviour, on_all_backends};

/// Runs `processor args…` with `stdin`.
pub fn processor(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its flags exits without reading its input:
    // the pipe may be closed before it is written.
    let wrote = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    if let Err(e) = wrote {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// `processor enqueue` into `partition` with `flags`; the output.
pub fn enqueue_cli(db: &TestDb, partition: &str, flags: &[&str], lines: &str) -> Output {
    let mut args = vec![
        "enqueue",
        "--database-url",
        &db.url,
        "--partition",
        partition,
    ];
    args.extend(flags);
    processor(&args, lines)
}

pub(crate) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

on_all_backends!(enqueue_is_all_or_nothing);
async fn enqueue_is_all_or_nothing(db: TestDb) {
    let bad = "{\"id\": \"a\", \"data\": {\"x\": 1}}\n{\"id\": \"b\", \"data\": 2}\n{\"id\": \"c\", \"dta\": 3}\n";
    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "p"],
        bad,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("line 3") && t.contains("nothing was written"),
        "{t}"
    );
    assert!(
        db.query("SELECT id FROM feed_items", vec![])
            .await
            .is_empty()
    );
    assert!(
        db.query("SELECT id FROM feed_partitions", vec![])
            .await
            .is_empty()
    );

    let good = "{\"id\": \"a\", \"data\": {\"x\": 1}}\n\n{\"data\": [2]}\n";
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &db.url,
            "--partition",
            "p",
            "--on-failure",
            "continue",
            "--no-auto-close",
            "-",
        ],
        good,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2 items enqueued; partition p created"));
    assert_eq!(db.item_row("a").await.data, json!({"x": 1}));
    let rows = db
        .query(
            "SELECT on_failure, auto_close FROM feed_partitions WHERE id = 'p'",
            vec![],
        )
        .await;
    assert_eq!(
        rows[0].try_get::<String>("", "on_failure").unwrap(),
        "continue"
    );
    assert!(!rows[0].try_get::<bool>("", "auto_close").unwrap());

    // --raw: each line is the data itself, even when it is not JSON.
    let o = processor(
        &[
            "enqueue",
            "--database-url",
            &db.url,
            "--partition",
            "raw",
            "--raw",
        ],
        "plain text\n{\"id\": 1}\n",
    );
    assert!(o.status.success(), "{}", text(&o));
    let n = db
        .query(
            "SELECT id FROM feed_items WHERE partition_id = 'raw'",
            vec![],
        )
        .await
        .len();
    assert_eq!(n, 2);
}

behaviour!(enqueue_refuses_low_gate_and_reopens);
async fn enqueue_refuses_low_gate_and_reopens(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.sql("UPDATE feed_partitions SET gate = 3, status = 'complete' WHERE id = 'p'")
        .await;
    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "p"],
        "{\"id\": \"low\", \"gate\": 1, \"data\": {}}\n",
    );
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(t.contains("gate 1") && t.contains("current gate 3"), "{t}");
    assert!(
        db.query("SELECT id FROM feed_items", vec![])
            .await
            .is_empty()
    );

    let o = processor(
        &["enqueue", "--database-url", &db.url, "--partition", "p"],
        "{\"id\": \"ok\", \"data\": {}}\n",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("1 item enqueued; partition p reopened"),
        "{}",
        text(&o)
    );
    assert_eq!(db.partition_status("p").await, "available");
    assert_eq!(
        db.item_row("ok").await.gate,
        3,
        "gate defaults to the partition's gate"
    );

    let Spawned(_h, _p) = Spawned::start(&db, &[], |_| done()).await;
    wait_for(
        "reopened partition complete",
        Duration::from_secs(30),
        || async { db.partition_status("p").await == "complete" },
    )
    .await;
}

behaviour!(status_and_retry);
async fn status_and_retry(db: TestDb) {
    db.partition_of("p", true, false, "block", &["bad", "good"])
        .await;
    let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = fail.clone();
    let Spawned(_h, p) = Spawned::start(&db, &[], move |c| {
        if c.item == "bad" && f.load(std::sync::atomic::Ordering::SeqCst) {
            no_retry(200, "cannot parse resume")
        } else {
            done()
        }
    })
    .await;
    db.wait_partition("p", "failed").await;
    let o = processor(&["status", "--database-url", &db.url, "--json"], "");
    assert!(o.status.success(), "{}", text(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["partitions_by_status"]["failed"], 1);
    assert_eq!(s["partitions"][0]["id"], "p");
    assert_eq!(s["partitions"][0]["gate"], 0);
    assert_eq!(
        s["partitions"][0]["items_by_status"],
        json!({"complete": 1, "failed": 1})
    );
    assert_eq!(
        s["partitions"][0]["items_by_gate"]["0"],
        json!({"complete": 1, "failed": 1})
    );
    assert_eq!(s["failed_items"][0]["id"], "bad");
    assert_eq!(s["failed_items"][0]["attempts"], 1);
    assert!(
        s["failed_items"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot parse resume")
    );
    assert_eq!(s["processors"].as_array().unwrap().len(), 1);
    let table = processor(
        &["status", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    let t = text(&table);
    assert!(
        t.contains("failed") && t.contains("cannot parse resume") && t.contains("0: 0/1/1"),
        "{t}"
    );

    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    let o = processor(
        &["retry", "--database-url", &db.url, "--partition", "p"],
        "",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 failed item back to available"));
    wait_for(
        "partition complete after retry",
        Duration::from_secs(30),
        || async { db.partition_status("p").await == "complete" },
    )
    .await;
    let row = db.item_row("bad").await;
    assert_eq!((row.status.as_str(), row.attempts), ("complete", 1));
    drop(p);
    let o = processor(&["retry", "--database-url", &db.url], "");
    assert_eq!(o.status.code(), Some(2), "retry needs --partition or --all");
}

behaviour!(metrics_move);
async fn metrics_move(db: TestDb) {
    db.partition_of("p", true, false, "block", &numbered("i", 4))
        .await;
    db.item("g1", "p", 1, json!({})).await;
    let Spawned(_h, p) = Spawned::start(&db, &[], |c| {
        if c.item == "i0" && c.attempt == 1 {
            reply(500, json!({}))
        } else {
            done()
        }
    })
    .await;
    db.wait_partition("p", "complete").await;
    let m = p.metrics().await;
    assert_eq!(metric(&m, "feed_items_total{outcome=\"done\"}"), 5.0, "{m}");
    assert_eq!(metric(&m, "feed_items_total{outcome=\"retried\"}"), 1.0);
    assert_eq!(
        metric(&m, "feed_handler_request_duration_seconds_count"),
        6.0
    );
    assert_eq!(metric(&m, "feed_gate_advances_total"), 1.0);
    assert_eq!(metric(&m, "feed_partitions_closed_total"), 1.0);
    assert_eq!(metric(&m, "feed_sessions_alive"), 1.0);
    assert!(metric(&m, "feed_statements_total") > 0.0);
    for series in [
        "feed_items_in_flight",
        "feed_partitions_held",
        "feed_steals_total",
        "feed_leases_lost_total",
        "feed_partitions_failed_total",
    ] {
        assert!(m.lines().any(|l| l.starts_with(series)), "{series} missing");
    }
    let base = format!("http://{}", p.listen.as_ref().unwrap());
    for (path, status) in [("healthz", 200), ("readyz", 200), ("admin", 404)] {
        let got = reqwest::get(format!("{base}/{path}"))
            .await
            .unwrap()
            .status();
        assert_eq!(got, status, "/{path}");
    }
}

behaviour!(secrets_never_printed);
/// A database password, the signing secret and `--header` values never
/// appear in logs, errors, `status` or `/metrics`.
async fn secrets_never_printed(db: TestDb) {
    // Trust auth accepts any password, so the URL can carry one.
    let url = match db.backend {
        Backend::Postgres => db.url.replace("postgres@", "postgres:pw-s3cret@"),
        _ => db.url.clone(),
    };
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"n": 1})).await;
    let h = Handler::start(|c| {
        let auth = c.header("authorization").unwrap_or("");
        if auth != "Bearer tok-s3cret" {
            return reply(401, json!({}));
        }
        done()
    })
    .await;
    let secret_db = clone_url(&db, &url);
    let p = Proc::start(
        &secret_db,
        &h.url(),
        &[
            "--header",
            "Authorization: Bearer tok-s3cret",
            "--signing-secret",
            "sig-s3cret-0123456789",
            "--signature-v1",
        ],
    );
    db.wait_partition("p", "complete").await;
    let call = &h.calls()[0];
    let sig = call.headers["feed-signature"].to_str().unwrap().to_string();
    // With --signature-v1 both: `t=…,v1=…,v2=…`.
    let (v1_part, v2) = sig.rsplit_once(",v2=").unwrap();
    let t = v1_part.trim_start_matches("t=").split(',').next().unwrap();
    assert_eq!(
        v1_part,
        feed::handler::signature(b"sig-s3cret-0123456789", t.parse().unwrap(), br#"{"n":1}"#)
    );
    assert_eq!(v2.len(), 64);
    assert!(signed(call, b"sig-s3cret-0123456789", br#"{"n":1}"#));
    let m = p.metrics().await;
    let status = text(&processor(&["status", "--database-url", &url], ""));
    let bad_scheme = text(&processor(
        &[
            "status",
            "--database-url",
            &url.replace("postgres:", "postgresx:")
                .replace("sqlite:", "sqlitex:"),
        ],
        "",
    ));
    let mut proc_ = p;
    proc_.terminate();
    let log = proc_.log();
    for (what, out) in [
        ("log", &log),
        ("metrics", &m),
        ("status", &status),
        ("error", &bad_scheme),
    ] {
        for secret in ["pw-s3cret", "tok-s3cret", "sig-s3cret-0123456789"] {
            assert!(!out.contains(secret), "{secret} printed in {what}:\n{out}");
        }
    }
    assert!(log.contains("processor started"), "{log}");
}

/// A second handle on the same database under another URL (no drop of its own).
fn clone_url(db: &TestDb, url: &str) -> TestDb {
    TestDb::alias(db, url)
}

#[tokio::test]
async fn demo_summary_matches_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/demo.db?mode=rwc", dir.path().display());
    let o = tokio::task::spawn_blocking({
        let url = url.clone();
        move || processor(&["demo", "--resumes", "12", "--database-url", &url], "")
    })
    .await
    .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("summary: 12 resumes classified, 10 ranked, partition complete"),
        "{t}"
    );
    let store = feed::Store::connect(&url, 2).await.unwrap();
    let s = store.status(Some("resumes")).await.unwrap();
    assert_eq!(s.partitions[0].status, "complete");
    assert_eq!(s.partitions[0].gate, 1);
    assert_eq!(s.partitions[0].items_by_status["complete"], 13);
    let top: Value =
        serde_json::from_slice(&store.item_data(None, "ranking").await.unwrap()).unwrap();
    let first = top["top"][0]["candidate"].as_str().unwrap();
    assert!(
        t.contains(&format!(" 1. {first}")),
        "the printed ranking is the stored one:\n{t}"
    );
}

#[test]
fn bad_command_lines_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--database-url",
                "oracle://u:pw-s3cret@h/db",
            ],
            "scheme must be",
        ),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--database-url",
                "postgres://u:pw-s3cret@[bad/db",
            ],
            "invalid database URL",
        ),
        (
            &["run", "--handler-url", "http://x/", "--poll-interval", "5q"],
            "500ms",
        ),
        (&["run"], "--handler-url"),
        (&["run", "--handler-url", "ftp://x/"], "http:// or https://"),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--heartbeat-interval",
                "20s",
            ],
            "--heartbeat-interval must be shorter",
        ),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--signing-secret",
                "whsec_pw-s3cret!",
            ],
            "--signing-secret: a secret starting with whsec_ must be base64",
        ),
        // A key too short to resist guessing, or none at all, is refused
        // rather than signing without protecting anything.
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--signing-secret",
                "whsec_QUJD",
            ],
            "--signing-secret: a signing secret's key is 3 bytes, under the 16",
        ),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--signing-secret",
                "short",
            ],
            "key is 5 bytes, under the 16",
        ),
        (
            &["run", "--handler-url", "http://x/", "--signing-secret", ""],
            "--signing-secret: a signing secret is empty",
        ),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--events-signing-secret",
                "0123456789",
            ],
            "--events-signing-secret: a signing secret's key is 10 bytes",
        ),
        (
            &[
                "run",
                "--handler-url",
                "http://x/",
                "--signature-scheme",
                "standard",
                "--signature-v1",
            ],
            "--signature-v1 adds v1 to Feed-Signature",
        ),
        (
            &["retry", "--partition", "a", "--all"],
            "cannot be used with",
        ),
        (
            &["run", "--handler-url", "http://x/", "--header", "NoColon"],
            "Name: value",
        ),
        (
            &["ui", "--admin-token-file", "/nonexistent/feed-token"],
            "--admin-token-file <ADMIN_TOKEN_FILE>': cannot read the file",
        ),
    ];
    for (args, hint) in cases {
        let o = processor(args, "");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(hint), "{args:?}: {err}");
        assert!(
            !err.contains("pw-s3cret"),
            "{args:?} printed a password: {err}"
        );
        assert!(
            err.lines().filter(|l| l.starts_with("error")).count() == 1,
            "{args:?}: {err}"
        );
    }
}

backend_tests!(json_logs: sqlite => Sqlite);
/// `--log-format json`: every log line is a JSON object with fields.
async fn json_logs(db: TestDb) {
    db.partition_of("p", true, false, "block", &["i"]).await;
    let Spawned(_h, mut p) = Spawned::start(&db, &["--log-format", "json"], |_| done()).await;
    db.wait_partition("p", "complete").await;
    assert!(p.terminate().success());
    let log = p.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "partition complete"
                && l["fields"]["partition"] == "p"),
        "{log}"
    );
}

behaviour!(status_says_its_list_is_bounded);
/// `status` lists at most 500 partitions and says so, with how many there
/// are; with 500 or fewer it says nothing of the kind.
async fn status_says_its_list_is_bounded(db: TestDb) {
    let rows: Vec<String> = (0..499).map(|k| format!("('s{k:03}')")).collect();
    db.sql(&format!(
        "INSERT INTO feed_partitions (id) VALUES {}",
        rows.join(", ")
    ))
    .await;
    let all = text(&processor(&["status", "--database-url", &db.url], ""));
    assert!(!all.contains("showing the first"), "{all}");
    db.sql("INSERT INTO feed_partitions (id) VALUES ('t1'), ('t2')")
        .await;
    let some = text(&processor(&["status", "--database-url", &db.url], ""));
    assert!(
        some.contains("showing the first 500 of 501 partitions"),
        "{some}"
    );
}

#[test]
/// `--help` shows an environment variable's value only when it is set:
/// an unset one reads `[env: NAME]`, never `[env: NAME=]` (set to empty).
fn help_shows_only_the_variables_that_are_set() {
    let o = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["status", "--help"])
        .env_remove("FEED_DATABASE_URL_FILE")
        .env("FEED_DB_POOLER", "session")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{help}");
    assert!(help.contains("[env: FEED_DATABASE_URL_FILE]"), "{help}");
    assert!(!help.contains("FEED_DATABASE_URL_FILE="), "{help}");
    assert!(help.contains("[env: FEED_DB_POOLER=session]"), "{help}");
}
