//! Hardening: a handler that answers huge bodies or asks for instant
//! retries, and ids no request can carry, cannot make the processor use
//! unbounded memory, loop hot, or retry what can never succeed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::support::{Handler, Proc, TestDb, numbered, retry_after};
use crate::{backend_tests, behaviour};

/// Answers just under the default 16 MiB cap.
const ANSWER_BYTES: usize = (16 << 20) - 64;

/// `{"done": true, <field>: [0,0,…]}` of about ANSWER_BYTES: one JSON
/// value per two bytes, the shape that used to become a tree of hundreds
/// of megabytes.
fn huge_answer(field: &str) -> Bytes {
    let head = format!("{{\"done\": true, \"{field}\": [0");
    let zeros = (ANSWER_BYTES - head.len() - 2) / 2;
    let mut body = Vec::with_capacity(ANSWER_BYTES);
    body.extend_from_slice(head.as_bytes());
    body.extend(std::iter::repeat_n(*b",0", zeros).flatten());
    body.extend_from_slice(b"]}");
    Bytes::from(body)
}

/// `body` with a length (`Content-Length`) or streamed in 1 MiB chunks
/// (no length known in advance).
fn answer(body: Bytes, streamed: bool) -> Response {
    if !streamed {
        return (StatusCode::OK, body).into_response();
    }
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(1 << 20)
        .map(|c| Ok(body.slice_ref(c)))
        .collect();
    Response::new(Body::from_stream(futures_util::stream::iter(chunks)))
}

backend_tests!(answers_are_held_within_the_budget: sqlite => Sqlite [slow], postgres => Postgres [slow]);
/// 64 calls answered at once with 16 MiB each (half with a length, half
/// streamed; two of them carry their 16 MiB as `data`): the processor's
/// peak memory stays bounded by the response budget, not by 64 answers,
/// and every answer is stored intact.
async fn answers_are_held_within_the_budget(db: TestDb) {
    const CALLS: usize = 64;
    let ids = numbered("m", CALLS);
    db.partition_of("mem", true, false, "continue", &ids).await;
    let (padded, with_data) = (huge_answer("padding"), huge_answer("data"));
    // The first 64 calls wait until all of them are in, so their answers
    // come together.
    let (arrived, all_in) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let h = Handler::start_async(move |c| {
        let (arrived, all_in) = (arrived.clone(), all_in.clone());
        let (padded, with_data) = (padded.clone(), with_data.clone());
        async move {
            let waiting = all_in.notified();
            match arrived.fetch_add(1, Ordering::SeqCst) + 1 {
                n if n < CALLS => waiting.await,
                CALLS => all_in.notify_waiters(),
                _ => {}
            }
            let n: usize = c.item[1..].parse().unwrap();
            let body = if n < 2 { with_data } else { padded };
            answer(body, n % 2 == 1)
        }
    })
    .await;
    let p = Proc::start(
        &db,
        &h.url(),
        &["--concurrency", "64", "--request-timeout", "900s"],
    );
    // A gigabyte of answers parsed by the test profile's unoptimized
    // processor takes most of a minute on a quiet machine, and took more
    // than five beside the whole suite on a slow one (the last answer,
    // waiting its turn in the budget, then outlasted a 300 s request
    // timeout and was taken twice).
    crate::support::wait_for(
        "partition mem complete",
        Duration::from_secs(600),
        || async { db.partition_status("mem").await == "complete" },
    )
    .await;
    let (_, peak) = p.memory();
    let peak = peak.expect("VmHWM from /proc");
    assert!(
        peak < 256.0,
        "peak RSS {peak:.0} MiB with 64 answers of 16 MiB; the budget is 16 MiB"
    );
    for row in db.item_rows(&ids[..2]).await {
        let stored = row.data.as_array().map_or(0, Vec::len);
        assert!(
            stored > 8_000_000,
            "{}: the 16 MiB data was stored intact, not {stored} elements ({} after {} attempts: {:?})",
            row.id,
            row.status,
            row.attempts,
            row.last_error
        );
    }
    assert_eq!(h.calls().len(), CALLS, "each answer taken once");
}

behaviour!(retry_after_zero_is_not_a_hot_loop);
/// A handler that answers every call with 503 and `Retry-After: 0`, with
/// unlimited attempts: each retry still waits at least `--backoff-base`
/// (50 ms here), so one item draws a few dozen calls in two seconds, not
/// thousands.
async fn retry_after_zero_is_not_a_hot_loop(db: TestDb) {
    db.partition_of("hot", true, false, "continue", &["again"])
        .await;
    let h = Handler::start(|_| retry_after(503, "0", "busy")).await;
    let _p = Proc::start(&db, &h.url(), &["--max-attempts", "0"]);
    crate::support::wait_for("the first call", Duration::from_secs(30), || async {
        !h.calls().is_empty()
    })
    .await;
    let first = h.calls()[0].at;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = h
        .calls()
        .iter()
        .filter(|c| c.at <= first + Duration::from_secs(2))
        .count();
    assert!(
        (2..=41).contains(&calls),
        "{calls} calls in 2 s; at least 50 ms between retries allows at most 41"
    );
    let row = db.item_row("again").await;
    assert_eq!(row.status, "available", "still retried: {row:?}");
    assert!(row.not_before.is_some(), "a backoff is stored: {row:?}");
}

behaviour!(an_id_that_cannot_be_sent_fails_at_once);
/// An item id written with plain SQL that holds a control character can
/// never be a header value: the item fails on its first attempt, with a
/// message that says why, even with unlimited attempts; its data is kept.
async fn an_id_that_cannot_be_sent_fails_at_once(db: TestDb) {
    db.partition("ctl", true, false, "continue").await;
    db.item("bad\u{1b}id", "ctl", 0, json!({"keep": 1})).await;
    db.item("fine", "ctl", 0, json!({})).await;
    let h = Handler::start(|_| crate::support::done()).await;
    let _p = Proc::start(&db, &h.url(), &["--max-attempts", "0"]);
    db.wait_partition("ctl", "complete").await;
    let row = db
        .assert_failed("bad\u{1b}id", 1, &["can never be sent"])
        .await;
    assert_eq!(row.data, json!({"keep": 1}));
    assert_eq!(db.item_row("fine").await.status, "complete");
    assert!(h.calls_for("bad\u{1b}id").is_empty());
}

behaviour!(bad_filters_and_ids_answer_400);
/// A NUL or another control character in an id, `after`, `prefix` or
/// `status`, and a status no row can have, answer 400 with a JSON error
/// that says what was wrong, on every backend (PostgreSQL cannot even
/// compare a NUL).
async fn bad_filters_and_ids_answer_400(db: TestDb) {
    crate::console_api::enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let base = crate::console_api::serve(db.store.clone(), None).await;
    for path in [
        "/api/v1/partitions?prefix=a%00",
        "/api/v1/partitions?after=a%00",
        "/api/v1/partitions?status=a%00",
        "/api/v1/partitions?status=bogus",
        "/api/v1/partitions/a%00b",
        "/api/v1/partitions/p/items?after=%00",
        "/api/v1/partitions/p/items?status=done",
        "/partitions/a%00b",
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("control character") || text.contains("is not one of"),
            "{path}: {text}"
        );
    }
    let (code, _) = crate::console_api::get(&base, "/api/v1/partitions?prefix=p").await;
    assert_eq!(code, StatusCode::OK);
}

behaviour!(entrances_refuse_what_feed_cannot_serve);
/// Ids that are empty, too long or hold control characters, and gates
/// beyond 2^53, are refused where they come in, with what to do instead;
/// nothing is written.
async fn entrances_refuse_what_feed_cannot_serve(db: TestDb) {
    use feed::store::{NewItem, PartitionSpec};
    let item = |id: &str, gate: Option<i64>| {
        let item = NewItem::new(b"{}".to_vec()).with_id(id);
        gate.map_or(item.clone(), |g| item.at_gate(g))
    };
    let spec = PartitionSpec::default();
    let long = "x".repeat(256);
    for (partition, items, says) in [
        ("", vec![item("a", None)], "is empty"),
        ("p\nforged", vec![item("a", None)], "control character"),
        (
            long.as_str(),
            vec![item("a", None)],
            "longer than 255 bytes",
        ),
        ("ok", vec![item("a\u{0}b", None)], "control character"),
        ("ok", vec![item("a", Some(i64::MAX))], "out of range"),
    ] {
        let e = db.store.enqueue(partition, &spec, items).await.unwrap_err();
        assert!(
            matches!(e, feed::Error::Invalid(_)) && e.to_string().contains(says),
            "{partition:?}: {e}"
        );
    }
    assert_eq!(crate::retention::count(&db, "feed_partitions").await, 0);
    let mut manual = PartitionSpec::default();
    manual.manual_checkpoint = true;
    db.store
        .enqueue("m", &manual, vec![item("m/1", None)])
        .await
        .unwrap();
    let e = db.store.checkpoint("m", i64::MAX).await.unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

backend_tests!(token_guessing_is_throttled_and_logged: sqlite => Sqlite);
/// Wrong admin tokens from one address: after ten, that address is
/// refused (429 with `Retry-After`) even with the right token, and the
/// failed attempts are logged with the address, once.
async fn token_guessing_is_throttled_and_logged(db: TestDb) {
    const TOKEN: &str = "right-token-0123456789";
    crate::console_api::enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let h = Handler::start(|_| crate::support::done()).await;
    let mut p = Proc::start(&db, &h.url(), &["--ui", "--admin-token", TOKEN]);
    let base = format!("http://{}", p.listen.clone().unwrap());
    crate::support::wait_console(&base).await;
    let pause = "/api/v1/partitions/p/pause";
    for n in 0..10 {
        let wrong = format!("wrong-token-{n:012}");
        let (code, _) = crate::console_api::post(&base, pause, Some(&wrong), None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "attempt {n}");
    }
    let r = reqwest::Client::new()
        .post(format!("{base}{pause}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    let login = reqwest::Client::new()
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        login.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the login form too"
    );
    p.terminate();
    let log = p.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("wrong token")).collect();
    assert_eq!(
        lines.len(),
        1,
        "one line per kind of token per minute:\n{log}"
    );
    assert!(lines[0].contains("latest=127.0.0.1"), "{}", lines[0]);
}

backend_tests!(idle_and_slow_sockets_do_not_hold_the_listener: sqlite => Sqlite);
/// A thousand sockets that send nothing do not keep `/healthz` from
/// answering (another address: one address holds at most 512), and a
/// socket that sends half a request line is closed.
async fn idle_and_slow_sockets_do_not_hold_the_listener(db: TestDb) {
    let _ = rlimit::increase_nofile_limit(4_096);
    let h = Handler::start(|_| crate::support::done()).await;
    let p = Proc::start(&db, &h.url(), &[]);
    let addr = p.listen.clone().unwrap();
    let base = format!("http://{addr}");
    crate::support::wait_for("the listener", Duration::from_secs(30), || async {
        reqwest::get(format!("{base}/healthz")).await.is_ok()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let health = tokio::time::timeout(
        Duration::from_secs(5),
        other.get(format!("{base}/healthz")).send(),
    )
    .await
    .expect("/healthz answers within 5 s while 1,000 sockets idle")
    .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /heal").await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(20), slow.read(&mut buf))
        .await
        .expect("a half-sent request is closed within the header timeout");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    drop(idle);
}

crate::behaviour!(one_client_cannot_take_every_connection);
/// One address opens more connections than the listener serves at once
/// (4,096), each sending half a request's headers: it keeps at most its
/// share (512), the rest are closed at once, and `/healthz` and the login
/// page still answer another address.
async fn one_client_cannot_take_every_connection(db: TestDb) {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let h = Handler::start(|_| crate::support::done()).await;
    let token = "connections-admin-token-0123456789";
    let p = Proc::start(&db, &h.url(), &["--ui", "--admin-token", token]);
    let addr = p.listen.clone().unwrap();
    let base = format!("http://{addr}");
    crate::support::wait_console(&base).await;
    let mut flood = Vec::new();
    for _ in 0..4_300 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // Closed already, or the header goes nowhere: either way it holds nothing.
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
        flood.push(s);
    }
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for path in ["/healthz", "/login"] {
        let r = other.get(format!("{base}{path}")).send().await;
        let r = r.unwrap_or_else(|e| panic!("{path} answers another address: {e}"));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    // The connections past the share were closed before the listener
    // took the other address's, so their end has arrived.
    let mut open = 0;
    for s in &flood {
        let mut buf = [0u8; 1];
        if matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            open += 1;
        }
    }
    assert!(open <= 512, "{open} of 4,300 connections kept");
    assert!(open >= 256, "{open}: the first ones are served");
}

backend_tests!(printed_text_is_escaped_and_secrets_hidden: sqlite => Sqlite);
/// Ids and error messages written with plain SQL or by a handler cannot
/// forge a log line or drive a terminal, text logs to a file carry no
/// colour codes, and the handler URL's password and secret query values
/// show in neither the log nor `run --help`.
async fn printed_text_is_escaped_and_secrets_hidden(db: TestDb) {
    db.partition("p\nforged line", true, false, "block").await;
    db.item("i\u{1b}]0;title\u{7}", "p\nforged line", 0, json!({}))
        .await;
    db.partition("q", true, false, "block").await;
    db.item("q1", "q", 0, json!({})).await;
    let h = Handler::start(|_| {
        crate::support::json(
            200,
            json!({"error": {"message": "bad \u{1b}[31mred", "no_retry": true}}),
        )
    })
    .await;
    let url = h
        .url()
        .replace("http://", "http://user:pw-s3cret@")
        .replace("/feed", "/feed?api_key=k-s3cret");
    let mut p = Proc::start(&db, &url, &[]);
    db.wait_partition("p\nforged line", "failed").await;
    db.wait_partition("q", "failed").await;
    p.terminate();
    let log = p.log();
    assert!(!log.contains('\u{1b}'), "an escape code in the log:\n{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("forged")),
        "a forged log line:\n{log}"
    );
    assert!(log.contains("p\\nforged line"), "{log}");
    for secret in ["pw-s3cret", "k-s3cret"] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    let status = crate::cli::processor(&["status", "--database-url", &db.url], "");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out}");
    assert!(out.contains("\\u{1b}[31mred"), "{out}");
    assert!(out.contains("i\\u{1b}]0;title\\u{7}"), "{out}");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["run", "--help"])
        .env("FEED_HANDLER_URL", &url)
        .env("FEED_DATABASE_URL", "postgres://u:db-s3cret@h/feed")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for secret in ["pw-s3cret", "k-s3cret", "db-s3cret"] {
        assert!(!help.contains(secret), "{secret} in run --help");
    }
}

backend_tests!(the_console_answers_only_known_hosts: sqlite => Sqlite);
/// A request naming another host (a page on an attacker's name that
/// resolves to the console: DNS rebinding) is refused with 421; IP
/// addresses, `localhost` and `--allowed-host` names are answered. The
/// listener itself defaults to loopback.
async fn the_console_answers_only_known_hosts(db: TestDb) {
    assert!(feed::Config::LISTEN.starts_with("127.0.0.1:"));
    crate::console_api::enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let base = crate::console_api::serve(db.store.clone(), None).await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let get = |host: String| {
        let url = format!("{base}/api/v1/partitions/p");
        async move {
            reqwest::Client::new()
                .get(url)
                .header("host", host)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        get(format!("evil.example:{port}")).await,
        StatusCode::MISDIRECTED_REQUEST
    );
    assert_eq!(get(format!("localhost:{port}")).await, StatusCode::OK);
    assert_eq!(get(format!("127.0.0.1:{port}")).await, StatusCode::OK);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = feed::console::Console::new(db.store.clone(), None)
        .allowing(&["feed.example".to_string()])
        .router();
    tokio::spawn(feed::server::serve(listener, app, std::future::pending()));
    let allowed = reqwest::Client::new()
        .get(format!("http://{addr}/api/v1/partitions/p"))
        .header("host", "feed.example")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
}

behaviour!(api_errors_have_one_shape);
/// Every failed API answer is `{"error": {"message": …}}`, also the ones
/// the framework makes (a query that does not parse, a repeated
/// parameter, a body too large, an unknown path); `after=` on an unknown
/// partition is 404; `prefix` matches case exactly on every backend.
async fn api_errors_have_one_shape(db: TestDb) {
    crate::console_api::enqueue(&db, "Abc", false, &[("Abc/1", 0)]).await;
    crate::console_api::enqueue(&db, "abd", false, &[("abd/1", 0)]).await;
    let base = crate::console_api::serve(db.store.clone(), Some(crate::console_api::TOKEN)).await;
    for (path, code) in [
        ("/api/v1/partitions?limit=-1", StatusCode::BAD_REQUEST),
        (
            "/api/v1/partitions/Abc/items?gate=abc",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/v1/partitions?prefix=a&prefix=b",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/v1/partitions/nope/items?after=x",
            StatusCode::NOT_FOUND,
        ),
        ("/api/v1/no/such/path", StatusCode::NOT_FOUND),
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(r.status(), code, "{path}");
        let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert!(v["error"]["message"].is_string(), "{path}: {v}");
    }
    // Refused from its declared length, while the body is still unsent (a
    // client that sent it all could see its connection reset first).
    let addr = base.trim_start_matches("http://");
    let bearer = format!("Authorization: Bearer {}", crate::console_api::TOKEN);
    let path = "/api/v1/partitions/Abc/checkpoint";
    let big = crate::bodies::answer_before_body(addr, "POST", path, &[&bearer]).await;
    let (code, body) = big.expect("a body over the cap is answered at once");
    assert_eq!(code, 413);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"]["message"].is_string(), "{v}");
    let (code, page) = crate::console_api::get(&base, "/api/v1/partitions?prefix=ab").await;
    assert_eq!(code, StatusCode::OK);
    let ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["abd"], "prefix ab is not Abc");
}

backend_tests!(secrets_come_from_files: sqlite => Sqlite);
/// The database URL and the handler's headers can come from files, so
/// neither shows in the process list or the environment.
async fn secrets_come_from_files(db: TestDb) {
    db.partition_of("f", true, false, "block", &["f1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let (url_file, header_file) = (dir.path().join("url"), dir.path().join("headers"));
    std::fs::write(&url_file, format!("{}\n", db.url)).unwrap();
    std::fs::write(
        &header_file,
        "# the handler's key\nAuthorization: Bearer file-s3cret\n\nX-Tenant: t1\n",
    )
    .unwrap();
    let h = Handler::start(|c| match c.header("authorization") {
        Some("Bearer file-s3cret") if c.header("x-tenant") == Some("t1") => crate::support::done(),
        _ => crate::support::no_retry(401, "no key"),
    })
    .await;
    let (url_arg, header_arg) = (
        url_file.display().to_string(),
        header_file.display().to_string(),
    );
    let mut p = Proc::start(&db, &h.url(), &["--header-file", &header_arg]);
    db.wait_partition("f", "complete").await;
    p.terminate();
    let log = p.log();
    assert!(!log.contains("file-s3cret"), "{log}");
    let status = crate::cli::processor(&["status", "--database-url-file", &url_arg], "");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && out.contains("complete: 1"),
        "{out}"
    );
}
