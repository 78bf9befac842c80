//! A hostile world: misbehaving handlers, bad rows written by
//! hand, an unreachable database and killed connections. Whatever happens,
//! the processor keeps running, loses nothing, and says what went wrong.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use sea_orm::ConnectionTrait;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    Handler, Proc, Reserved, Spawned, TestDb, done, json as reply, no_retry, numbered, retry_after,
    signed, wait_for,
};
use crate::{backend_tests, on_all_backends};

const BEHAVIOURS: &[&str] = &[
    "slow", "nonjson", "gate_x", "neg_gate", "done_str", "big", "r301", "r302", "r429", "r503date",
    "ok", "array",
];

on_all_backends!(misbehaving_handlers);
/// Every kind of bad answer at once, one item each; `continue` so the
/// partition closes when they are settled.
async fn misbehaving_handlers(db: TestDb) {
    db.partition("p", true, false, "continue").await;
    for name in BEHAVIOURS {
        db.item(name, "p", 0, json!({"keep": name})).await;
    }
    let h = Handler::start_async(|c| async move {
        let first = c.attempt == 1;
        match c.item.as_str() {
            "slow" => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                done()
            }
            "nonjson" => (StatusCode::OK, "<html>oops</html>").into_response(),
            "gate_x" => reply(200, json!({"gate": "x"})),
            "neg_gate" => reply(200, json!({"gate": -1})),
            "done_str" => reply(200, json!({"done": "yes"})),
            "big" => reply(200, json!({"done": true, "data": "x".repeat(5000)})),
            "array" => reply(200, json!([1, 2])),
            "r301" => (
                StatusCode::MOVED_PERMANENTLY,
                [("Location", "http://example.com/")],
                "",
            )
                .into_response(),
            "r302" => {
                (StatusCode::FOUND, [("Location", "http://example.com/")], "").into_response()
            }
            "r429" if first => retry_after(429, "1", ""),
            "r503date" if first => {
                let when =
                    httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
                retry_after(503, &when, "")
            }
            _ => done(),
        }
    })
    .await;
    let _p = Proc::start(
        &db,
        &h.url(),
        &[
            "--max-attempts",
            "2",
            "--request-timeout",
            "1s",
            "--max-response-bytes",
            "1000",
        ],
    );
    db.wait_item("ok", "complete").await;
    db.wait_partition("p", "complete").await;
    // The items that failed, by what their last_error says and after how
    // many attempts (redirects are not retried).
    let failed: &[(&[&str], i32, &str)] = &[
        (&["slow"], 2, "--request-timeout"),
        (&["nonjson", "array"], 2, "not a JSON object"),
        (&["gate_x", "neg_gate"], 2, "integer from 0 to 2^53"),
        (&["done_str"], 2, "true or false"),
        (&["big"], 2, "exceeds the 1000 byte cap"),
        (&["r301", "r302"], 1, "redirects are not followed"),
    ];
    let mut rows = Vec::new();
    for (ids, attempts, says) in failed {
        for id in *ids {
            rows.push(db.assert_failed(id, *attempts, &[says]).await);
        }
    }
    for (id, attempts) in [("r429", 2), ("r503date", 2), ("ok", 1)] {
        let row = db.item_row(id).await;
        assert_eq!(
            (row.status.as_str(), row.attempts),
            ("complete", attempts),
            "{id}: {row:?}"
        );
        assert_eq!(row.last_error, None, "{id}");
        rows.push(row);
    }
    for row in rows {
        assert_eq!(
            row.data,
            json!({"keep": row.id}),
            "{}: data changed without a valid answer",
            row.id
        );
    }
    assert_eq!(h.calls_for("r301").len(), 1);
    for (id, min) in [("r429", 900), ("r503date", 900)] {
        let calls = h.calls_for(id);
        let gap = calls[1].at - calls[0].at;
        assert!(
            gap >= Duration::from_millis(min),
            "{id}: retried after {gap:?}"
        );
    }
}

on_all_backends!(broken_connections);
/// A handler whose connection dies: cut off mid-body, or reset. Each is a
/// failed attempt (retried), the data is kept, and the processor goes on.
async fn broken_connections(db: TestDb) {
    db.partition("p", true, false, "continue").await;
    db.item("cut", "p", 0, json!({"keep": 1})).await;
    db.item("reset", "p", 0, json!({"keep": 2})).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/feed", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&got).to_lowercase();
                if head.contains("feed-item-id: cut") {
                    let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"done\": tr")
                        .await;
                    let _ = sock.shutdown().await;
                } else {
                    let _ = sock.set_zero_linger(); // closing now sends a TCP reset
                }
            });
        }
    });
    let p = Proc::start(&db, &url, &["--max-attempts", "2"]);
    db.wait_partition("p", "complete").await;
    for (id, keep) in [("cut", 1), ("reset", 2)] {
        let row = db.assert_failed(id, 2, &["handler request failed"]).await;
        assert_eq!(row.data, json!({"keep": keep}));
    }
    let mut p = p;
    assert!(p.child.try_wait().unwrap().is_none(), "the processor died");
    assert!(p.terminate().success());
}

on_all_backends!(hand_written_rows);
/// Rows written by hand that Feed cannot run are failed with a
/// `last_error` that says why; a far gate is reached in one step.
async fn hand_written_rows(db: TestDb) {
    db.partition_of("p", true, false, "continue", &["ok"]).await;
    db.item("far", "p", 1000, json!({})).await;
    db.item("neg", "p", -1, json!({})).await;
    db.exec(
        "INSERT INTO feed_items (id, partition_id, status, data) VALUES ('weird', 'p', 'pending', ?)",
        vec![b"{}".to_vec().into()],
    )
    .await;
    // An item whose partition does not exist is refused by the foreign key.
    let orphan = db
        .store
        .connection()
        .execute_unprepared(
            "INSERT INTO feed_items (id, partition_id, data) VALUES ('orphan', 'nope', 'x')",
        )
        .await;
    assert!(orphan.is_err(), "an item without a partition was accepted");
    let Spawned(h, p) = Spawned::start(&db, &[], |_| done()).await;
    db.wait_partition("p", "complete").await;
    let (_, gate, _) = db.partition_row("p").await;
    assert_eq!(
        gate, 1000,
        "the gate jumped straight to the next gate with work"
    );
    assert_eq!(db.item_row("far").await.status, "complete");
    let weird = db.item_row("weird").await;
    assert_eq!(weird.status, "failed");
    assert!(
        weird
            .last_error
            .unwrap()
            .contains("unknown status 'pending'")
    );
    let neg = db.item_row("neg").await;
    assert_eq!(neg.status, "failed");
    assert!(
        neg.last_error
            .unwrap()
            .contains("below its partition's gate")
    );
    assert!(h.calls_for("neg").is_empty() && h.calls_for("weird").is_empty());
    let mut p = p;
    assert!(p.terminate().success());
}

on_all_backends!(signed_requests_verify);
/// `Feed-Signature` (v2) verifies with the secret (read from a file); a
/// tampered body or a changed Feed header does not.
async fn signed_requests_verify(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("i", "p", 0, json!({"amount": 10})).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "file-s3cret-0123456789\n").unwrap();
    let h = Handler::start(|c| {
        let body = serde_json::to_vec(&c.data).unwrap();
        let mut forged = c.clone();
        forged
            .headers
            .insert("feed-item-id", "other".parse().unwrap());
        if signed(c, b"file-s3cret-0123456789", &body)
            && !signed(c, b"file-s3cret-0123456789", br#"{"amount":1000}"#)
            && !signed(&forged, b"file-s3cret-0123456789", &body)
        {
            reply(200, json!({"done": true, "data": {"verified": true}}))
        } else {
            no_retry(401, "bad signature")
        }
    })
    .await;
    let file_arg = file.display().to_string();
    let _p = Proc::start(&db, &h.url(), &["--signing-secret-file", &file_arg]);
    wait_for("partition settled", Duration::from_secs(30), || async {
        db.partition_status("p").await != "available"
    })
    .await;
    assert_eq!(db.item_row("i").await.data, json!({"verified": true}));
}

backend_tests!(database_unreachable_at_start: postgres => Postgres);
/// The database is unreachable when the processor starts: it retries,
/// says why, reports not ready, and works once the database appears.
async fn database_unreachable_at_start(db: TestDb) {
    db.partition_of("p", true, false, "block", &["i"]).await;
    let port = Reserved::new();
    let url = db
        .url
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{}", port.port()));
    let h = Handler::start(|_| done()).await;
    let p = Proc::start(&TestDb::alias(&db, &url), &h.url(), &[]);
    let ready = format!("http://{}/readyz", p.listen.as_ref().unwrap());
    wait_for(
        "the processor logs the unreachable database",
        Duration::from_secs(30),
        || async { p.log().contains("database unreachable; retrying") },
    )
    .await;
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), 503);
    assert_eq!(db.partition_status("p").await, "available");
    // The database appears: a proxy on the port the processor dials.
    let listener = port.listen();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect("127.0.0.1:5432").await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    db.wait_partition("p", "complete").await;
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), 200);
}

backend_tests!(postgres_connections_killed: postgres => Postgres);
/// PostgreSQL kills the processor's connections mid-run, several times:
/// it survives, every item is acknowledged exactly once, work resumes.
async fn postgres_connections_killed(db: TestDb) {
    db.partition("p", true, false, "block").await;
    for i in 0..200 {
        db.item(&format!("i{i}"), "p", 0, json!({"n": i})).await;
    }
    let Spawned(_h, mut p) = Spawned::start_async(&db, &["--concurrency", "8"], |_| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        done()
    })
    .await;
    let name = db.url.rsplit('/').next().unwrap().to_string();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let admin = feed::Store::connect("postgres://postgres@127.0.0.1:5432/postgres", 1)
            .await
            .unwrap();
        admin
            .connection()
            .execute_unprepared(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = '{name}' AND application_name = 'feed-processor'"
            ))
            .await
            .unwrap();
    }
    db.wait_partition("p", "complete").await;
    for row in db.item_rows(&numbered("i", 200)).await {
        assert_eq!(
            (row.status.as_str(), row.version),
            ("complete", 1),
            "{} acknowledged more than once",
            row.id
        );
    }
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "the processor died:\n{}",
        p.log()
    );
    assert!(p.terminate().success());
}
