//! The enqueue budget is taken as bytes arrive: clients that announce
//! large bodies and send them slowly hold only what they sent, so they
//! starve no other tenant's enqueue.

use std::time::Duration;

use feed::store::ProducerScope;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::behaviour;
use crate::enqueue_api::{ADMIN, PRODUCER, send, serve};
use crate::support::TestDb;

/// Opens a connection to `addr` that enqueues with `token`, announcing a
/// body of 16 MiB, and sends one byte of it once the server has begun
/// reading the body (its `100 Continue`: it has taken what it takes
/// before the first byte).
async fn slow(addr: &str, token: &str, partition: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/partitions/{partition}/items HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        16 << 20
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed: {got:?}");
        got.push(byte[0]);
    }
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 100"), "{got}");
    s.write_all(b"[").await.unwrap();
    s
}

behaviour!(slow_bodies_starve_no_one);
/// Two slow bodies of 16 MiB announced (the budget is 32 MiB) from two
/// tokens, one of them another tenant's: while both are still open, a
/// tenant's one-item enqueue answers. Before, the budget was taken at the
/// head, and this enqueue waited for the slow bodies' request timeout.
async fn slow_bodies_starve_no_one(db: TestDb) {
    let (_, other) = db
        .store
        .create_producer_token(&ProducerScope::new("other").unwrap())
        .await
        .unwrap();
    let (_, acme) = db
        .store
        .create_producer_token(&ProducerScope::new("acme").unwrap())
        .await
        .unwrap();
    let base = serve(db.store.clone(), Some(ADMIN), Some(PRODUCER)).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for (token, partition) in [(PRODUCER, "s-1"), (other.as_str(), "s-2")] {
        held.push(slow(&addr, token, partition).await);
    }
    let enqueue = send(
        &base,
        "/api/v1/partitions/acme-1/items",
        Some(&acme),
        None,
        r#"[{"data": 1}]"#,
    );
    let (code, answer) = tokio::time::timeout(Duration::from_secs(20), enqueue)
        .await
        .expect("a one-item enqueue is not starved by slow bodies");
    assert_eq!(code, StatusCode::OK, "{answer}");
    // The slow bodies were still open all along.
    for mut s in held {
        s.write_all(b" ").await.expect("still open");
    }
}
