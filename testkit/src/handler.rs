//! A real HTTP handler served on 127.0.0.1 that records every call it
//! receives and answers with a closure.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

/// One request the handler received.
#[derive(Debug, Clone)]
pub struct Call {
    /// `Feed-Item-Id` (empty for a batch).
    pub item: String,
    pub partition: String,
    pub gate: i64,
    pub attempt: u32,
    pub processor: String,
    pub idempotency_key: String,
    pub data: serde_json::Value,
    /// The request body exactly as received.
    pub body: Vec<u8>,
    pub headers: HeaderMap,
    pub at: Instant,
}

impl Call {
    /// The text of the header `name`, if it was sent (and is text).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// How the handler answers a call.
pub type Answer = Box<dyn Fn(&Call) -> Response + Send + Sync>;

/// A real HTTP handler served on 127.0.0.1 that records every call.
pub struct Handler {
    pub addr: SocketAddr,
    pub ledger: Arc<Mutex<Vec<Call>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Handler {
    /// Serves `answer` on a free port.
    pub async fn start<F>(answer: F) -> Handler
    where
        F: Fn(&Call) -> Response + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(Box::new(answer))).await
    }

    /// Serves an async answer (one that may wait) on a free port.
    pub async fn start_async<F, Fut>(answer: F) -> Handler
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve_async(listener, answer).await
    }

    /// Serves `answer` on a listener the caller bound (e.g. a port chosen earlier).
    pub async fn serve(listener: tokio::net::TcpListener, answer: Arc<Answer>) -> Handler {
        Self::serve_async(listener, move |c| {
            let answer = answer.clone();
            async move { answer(&c) }
        })
        .await
    }

    async fn serve_async<F, Fut>(listener: tokio::net::TcpListener, answer: F) -> Handler
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let ledger: Arc<Mutex<Vec<Call>>> = Arc::default();
        let answer = Arc::new(answer);
        let l = ledger.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let l = l.clone();
            let answer = answer.clone();
            async move {
                let call = parse_call(headers, &body);
                l.lock().push(call.clone());
                answer(call).await
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Handler { addr, ledger, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/feed", self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.ledger.lock().clone()
    }

    pub fn calls_for(&self, item: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.item == item)
            .collect()
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn parse_call(headers: HeaderMap, body: &[u8]) -> Call {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    Call {
        item: h("feed-item-id"),
        partition: h("feed-partition-id"),
        gate: h("feed-gate").parse().unwrap_or(-1),
        attempt: h("feed-attempt").parse().unwrap_or(0),
        processor: h("feed-processor-id"),
        idempotency_key: h("idempotency-key"),
        data: serde_json::from_slice(body).unwrap_or(serde_json::Value::Null),
        body: body.to_vec(),
        headers: headers.clone(),
        at: Instant::now(),
    }
}

/// A JSON answer with a status.
pub fn json(status: u16, body: serde_json::Value) -> Response {
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

/// What a handler does with `Feed-Signature` (v2): recompute the HMAC of
/// the time, the Feed headers and `body` with the secret, and compare
/// with each `v2` value (one per secret during a rotation).
pub fn signed(call: &Call, secret: &[u8], body: &[u8]) -> bool {
    verify_v2(call, |t| {
        feed::handler::signature_v2(secret, t, &call.headers, body)
    })
}

/// What an events receiver does with `Feed-Signature` (v2): as [`signed`],
/// with the string of an event, which no item request's matches.
pub fn signed_event(call: &Call, secret: &[u8], body: &[u8]) -> bool {
    verify_v2(call, |t| {
        feed::handler::event_signature_v2(secret, t, &call.headers, body)
    })
}

fn verify_v2(call: &Call, expected: impl Fn(i64) -> String) -> bool {
    let Some(header) = call
        .headers
        .get("feed-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let parts: Vec<(&str, &str)> = header
        .split(',')
        .filter_map(|p| p.split_once('='))
        .collect();
    let Some(t) = parts
        .iter()
        .find(|(k, _)| *k == "t")
        .and_then(|(_, t)| t.parse().ok())
    else {
        return false;
    };
    let expected = expected(t);
    parts.iter().any(|(k, v)| *k == "v2" && *v == expected)
}
