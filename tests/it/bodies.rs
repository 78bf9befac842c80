//! Bodies are read only after authentication: a request without the token
//! or a login is refused from its head, before any of its body is read,
//! and the bodies of actions, limits, event retries and page forms (the
//! login included) are capped at `MAX_ACTION_BODY_BYTES`, refused from
//! their declared length.

use std::time::Duration;

use feed::console::MAX_ACTION_BODY_BYTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::behaviour;
use crate::console_api::TOKEN;
use crate::support::{Handler, Proc, TestDb};

/// What a body-stuffing client declares: 2 MB, the old cap.
const DECLARED: usize = 2_000_000;

/// Sends the head of `method path` with `headers`, declaring a body of
/// [`DECLARED`] bytes, and 1 KiB of that body; the answer's status and
/// body, read while the rest of the body is still unsent. None when no
/// whole answer came within 10 s (the server waits for the body).
pub(crate) async fn answer_before_body(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[&str],
) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {DECLARED}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&[b'a'; 1024]).await.unwrap();
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        while !whole_answer(&got) {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&got).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// Whether `got` holds an answer's head and all the body its
/// `content-length` declares.
fn whole_answer(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    body.len() >= length.unwrap_or(0)
}

/// A login's cookie header.
async fn logged_in(base: &str) -> String {
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    format!("Cookie: {}", cookie.split(';').next().unwrap())
}

behaviour!(bodies_wait_for_authentication);
/// Every route that reads a body, asked without a token or a login (or
/// with a wrong token) and a 2 MB body of which only 1 KiB is sent,
/// answers 401 at once: it never waited for the body. With the right token
/// or a login, a body declared over the cap answers 413, also at once.
/// Small bodies still work.
async fn bodies_wait_for_authentication(db: TestDb) {
    assert_eq!(MAX_ACTION_BODY_BYTES, 8 << 10);
    crate::console_api::enqueue(&db, "p", true, &[("p/1", 0)]).await;
    let h = Handler::start(|_| crate::support::done()).await;
    let p = Proc::start(&db, &h.url(), &["--ui", "--admin-token", TOKEN]);
    let addr = p.listen.clone().unwrap();
    let base = format!("http://{addr}");
    crate::support::wait_console(&base).await;
    let json = "Content-Type: application/json";
    let form = "Content-Type: application/x-www-form-urlencoded";
    let wrong = "Authorization: Bearer wrong-token-0123456789";
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let cookie = logged_in(&base).await;
    for (method, path, headers, code) in [
        ("POST", "/api/v1/partitions/p/checkpoint", vec![json], 401),
        ("PUT", "/api/v1/limits/t", vec![json], 401),
        ("POST", "/api/v1/events/retry", vec![json, wrong], 401),
        ("POST", "/api/v1/items/p%2F1/retry", vec![json], 401),
        ("POST", "/partitions/p/pause", vec![form], 401),
        ("POST", "/items/p%2F1/retry", vec![form], 401),
        ("POST", "/limits", vec![form], 401),
        ("POST", "/limits/t/clear", vec![form], 401),
        ("POST", "/logout", vec![form], 401),
        ("POST", "/login", vec![form], 413),
        (
            "POST",
            "/api/v1/partitions/p/checkpoint",
            vec![json, &bearer],
            413,
        ),
        ("PUT", "/api/v1/limits/t", vec![json, &bearer], 413),
        ("POST", "/partitions/p/pause", vec![form, &cookie], 413),
    ] {
        let answer = answer_before_body(&addr, method, path, &headers).await;
        assert_eq!(
            answer.map(|(code, _)| code),
            Some(code),
            "{method} {path} {headers:?}: answered before the body was sent"
        );
    }
    let r = reqwest::Client::new()
        .put(format!("{base}/api/v1/limits/t"))
        .bearer_auth(TOKEN)
        .body(r#"{"weight": 2}"#)
        .send()
        .await
        .unwrap();
    let code = r.status();
    assert_eq!(code, reqwest::StatusCode::OK, "a small body still works");
}
