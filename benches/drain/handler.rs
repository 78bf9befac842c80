//! The benchmark's in-process handler, which answers as fast as it can
//! and counts, and the HTTP-only ceiling measured against it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::task::JoinSet;

use crate::fixture::item_body;

/// The in-process handler: counts POSTs, remembers when the first one came
/// and when each trickled item (id `pickup-*`) was first seen.
pub(crate) struct Handler {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<HandlerState>,
}

pub(crate) struct HandlerState {
    pub(crate) base: Instant,
    pub(crate) posts: AtomicU64,
    /// Nanoseconds since `base` (+1) of the first POST since the last reset; 0 = none yet.
    pub(crate) first: AtomicU64,
    pub(crate) latency: Duration,
    pub(crate) seen: Mutex<std::collections::HashMap<String, Instant>>,
    /// POSTs in each whole second since `base` (the first `SECONDS`).
    pub(crate) seconds: Vec<AtomicU64>,
}

/// Seconds of the handler's life counted one by one.
const SECONDS: usize = 4 * 3600;

impl HandlerState {
    pub(crate) fn reset(&self) {
        self.posts.store(0, Ordering::SeqCst);
        self.first.store(0, Ordering::SeqCst);
        self.seen.lock().unwrap().clear();
        for c in &self.seconds {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// POSTs in each whole second between the first POST's second and
    /// the last POST's (both partial, left out).
    pub(crate) fn per_second(&self) -> Vec<u64> {
        let Some(first) = self.first_post() else {
            return vec![];
        };
        let from = first.duration_since(self.base).as_secs() as usize + 1;
        let last = self
            .seconds
            .iter()
            .rposition(|c| c.load(Ordering::Relaxed) > 0)
            .unwrap_or(0);
        (from..last.max(from))
            .map(|k| self.seconds[k].load(Ordering::Relaxed))
            .collect()
    }

    pub(crate) fn first_post(&self) -> Option<Instant> {
        match self.first.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.base + Duration::from_nanos(n - 1)),
        }
    }

    pub(crate) fn seen(&self, id: &str) -> Option<Instant> {
        self.seen.lock().unwrap().get(id).copied()
    }
}

pub(crate) async fn answer(
    State(s): State<Arc<HandlerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    s.posts.fetch_add(1, Ordering::Relaxed);
    if let Some(c) = s.seconds.get((now - s.base).as_secs() as usize) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    if s.first.load(Ordering::Relaxed) == 0 {
        let n = u64::try_from((now - s.base).as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let _ = s
            .first
            .compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
    }
    if let Some(id) = headers.get("feed-item-id").and_then(|v| v.to_str().ok())
        && id.starts_with("pickup-")
    {
        s.seen.lock().unwrap().entry(id.to_string()).or_insert(now);
    }
    if !s.latency.is_zero() {
        tokio::time::sleep(s.latency).await;
    }
    // A batch: every item done (`null` answers), one per item.
    if let Some(n) = headers
        .get("feed-batch")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut reply = "null,".repeat(n);
        reply.pop();
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            format!("[{reply}]"),
        )
            .into_response();
    }
    if let Some(count) = spawn_of(&body) {
        let children: Vec<String> = (0..count)
            .map(|n| format!(r#"{{"data":{{"n":{n}}}}}"#))
            .collect();
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            format!(r#"{{"done":true,"items":[{}]}}"#, children.join(",")),
        )
            .into_response();
    }
    let reply: &'static str = match step_of(&body) {
        None => r#"{"done":true}"#,
        // Multi-step: gate 0 → gate 1, then one more step at gate 1, then done.
        Some(0) => r#"{"gate":1,"data":{"s":1}}"#,
        Some(1) => r#"{"data":{"s":2}}"#,
        Some(_) => r#"{"done":true}"#,
    };
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        reply,
    )
        .into_response()
}

/// The children a folder item (`{"spawn": K}`) answers; None for others.
fn spawn_of(body: &[u8]) -> Option<usize> {
    if !body.windows(8).any(|w| w == br#""spawn":"#) {
        return None;
    }
    let data = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    let count = data.get("spawn")?.as_u64()?;
    usize::try_from(count).ok()
}

/// The step counter `s` of a multi-step item's data; None for single-step items.
pub(crate) fn step_of(body: &[u8]) -> Option<u64> {
    if !body.windows(4).any(|w| w == br#""s":"#) {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("s")?
        .as_u64()
}

impl Handler {
    pub(crate) async fn start(latency: Duration) -> Result<Handler> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(HandlerState {
            base: Instant::now(),
            posts: AtomicU64::new(0),
            first: AtomicU64::new(0),
            latency,
            seen: Mutex::default(),
            seconds: (0..SECONDS).map(|_| AtomicU64::new(0)).collect(),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("handler stopped: {e}");
            }
        });
        Ok(Handler { addr, state })
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/feed", self.addr)
    }
}

/// The HTTP-only ceiling: `n` POSTs like the processor's (same headers and
/// bodies) to the same handler at `concurrency` with a plain reqwest loop.
pub(crate) async fn ceiling(handler: &Handler, n: usize, concurrency: usize) -> Result<f64> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = reqwest::Url::parse(&handler.url())?;
    handler.state.reset();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..concurrency {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                let id = format!("c-{i}");
                let resp = client
                    .post(url.clone())
                    .header("Content-Type", "application/json")
                    .header("Feed-Item-Id", &id)
                    .header("Feed-Partition-Id", "p-00000")
                    .header("Feed-Gate", "0")
                    .header("Feed-Attempt", "1")
                    .header("Feed-Processor-Id", "ceiling")
                    .header("Idempotency-Key", format!("{id}:0"))
                    .body(item_body(i, false))
                    .send()
                    .await?;
                let status = resp.status();
                let body = resp.bytes().await?;
                if !status.is_success() || body.is_empty() {
                    bail!("handler answered {status}");
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
