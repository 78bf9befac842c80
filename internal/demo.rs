//! `processor demo`: the resume example of Go Feed, end to end, on a
//! temporary SQLite database with a built-in HTTP handler.
//!
//! Gate 0 fans out: every resume is classified (a score from its skills and
//! years). Gate 1 fans in: one ranking item, dispatched only when every
//! resume is classified, reads them all from the URL in `Feed-Inputs` and
//! picks the top 10. The real processor runs in between, exactly as
//! `processor run` would; the handler keeps nothing between calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::store::{NewItem, PartitionSpec};
use crate::{Config, Result, Store};

const PARTITION: &str = "resumes";
const SKILLS: &[&str] = &[
    "rust",
    "sql",
    "go",
    "python",
    "kubernetes",
    "postgres",
    "http",
    "ml",
];
const NAMES: &[&str] = &[
    "Ada",
    "Alan",
    "Barbara",
    "Dennis",
    "Edsger",
    "Frances",
    "Grace",
    "Guido",
    "Jim",
    "John",
    "Ken",
    "Leslie",
    "Linus",
    "Margaret",
    "Niklaus",
    "Radia",
    "Rob",
    "Sophie",
    "Tony",
    "Whitfield",
];

/// What the demo ended with, to print and to check against the database.
#[derive(Debug)]
pub struct DemoSummary {
    /// Resumes classified at gate 0.
    pub classified: i64,
    /// The ranking item's answer: the top 10 candidates.
    pub top: Vec<Value>,
    /// The partition's final status.
    pub status: String,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs the demo with `resumes` resumes, telling `progress` each new line
/// of progress, on `database_url` or else a temporary SQLite database
/// removed afterwards.
pub async fn run(
    resumes: usize,
    database_url: Option<&str>,
    mut progress: impl FnMut(&str),
) -> Result<DemoSummary> {
    if let Some(url) = database_url {
        return run_in(url, resumes, &mut progress).await;
    }
    let dir = std::env::temp_dir().join(format!("feed-demo-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).map_err(|e| crate::Error::Invalid(format!("temp dir: {e}")))?;
    let url = format!("sqlite://{}/demo.db?mode=rwc", dir.display());
    let result = run_in(&url, resumes, &mut progress).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(url: &str, resumes: usize, progress: &mut impl FnMut(&str)) -> Result<DemoSummary> {
    let started = Instant::now();
    let store = Store::connect(url, 4).await?;
    store.migrate().await?;
    let mut items: Vec<NewItem> = (0..resumes)
        .map(|i| {
            let skills: Vec<&str> = SKILLS
                .iter()
                .copied()
                .filter(|_| rand::random::<f64>() < 0.4)
                .collect();
            let data = json!({
                "candidate": format!("{} #{i}", NAMES[i % NAMES.len()]),
                "years": rand::random::<u64>() % 15,
                "skills": skills,
            });
            NewItem::new(data.to_string().into_bytes())
                .with_id(format!("resume-{i:03}"))
                .at_gate(0)
        })
        .collect();
    items.push(
        NewItem::new(json!({"pick": 10}).to_string().into_bytes())
            .with_id("ranking")
            .at_gate(1),
    );
    store
        .enqueue(PARTITION, &PartitionSpec::default(), items)
        .await?;
    progress(&format!(
        "enqueued partition {PARTITION:?}: {resumes} resume{} at gate 0, 1 ranking item at gate 1",
        if resumes == 1 { "" } else { "s" }
    ));

    let (handler_url, _server) = serve_handler().await?;
    let mut config = Config::new(url, handler_url);
    // The ranking reads the classifications through the listener.
    config.listen.address = Some("127.0.0.1:0".into());
    config.dispatch.poll_interval = Duration::from_millis(100);
    config.leases.acquire_interval = Duration::from_millis(200);
    config.handler.concurrency = 4;
    let done = Arc::new(tokio::sync::Notify::new());
    let stop = done.clone();
    let processor = tokio::spawn(crate::run(config, async move { stop.notified().await }));

    let mut last = String::new();
    let status = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let s = store.status(Some(PARTITION)).await?;
        let Some(p) = s.partitions.first() else {
            continue;
        };
        let count = |gate: i64, status: &str| {
            p.items_by_gate
                .get(&gate)
                .and_then(|m| m.get(status))
                .copied()
                .unwrap_or(0)
        };
        let line = format!(
            "gate {} | classify (gate 0): {}/{} done | rank (gate 1): {} | partition {}",
            p.gate,
            count(0, "complete"),
            resumes,
            if count(1, "complete") == 1 {
                "done"
            } else if p.gate >= 1 {
                "running"
            } else {
                "waiting for fan-in"
            },
            p.status
        );
        if line != last {
            progress(&line);
            last = line;
        }
        if p.status != "available" {
            break p.status.clone();
        }
    };
    done.notify_one();
    let _ = processor.await;

    let rows = store.status(Some(PARTITION)).await?;
    let classified = rows.partitions[0]
        .items_by_gate
        .get(&0)
        .and_then(|m| m.get("complete"))
        .copied()
        .unwrap_or(0);
    let ranking = store.item_data(Some(PARTITION), "ranking").await?;
    let top = serde_json::from_slice::<Value>(&ranking)
        .ok()
        .and_then(|v| v.get("top").and_then(|t| t.as_array().cloned()))
        .unwrap_or_default();
    Ok(DemoSummary {
        classified,
        top,
        status,
        elapsed: started.elapsed(),
    })
}

/// The example handler: classify at gate 0, rank at gate 1. It keeps no
/// state: the ranking reads every classification from `Feed-Inputs`, so
/// any replica of it could answer either step, before or after a restart.
async fn serve_handler() -> Result<(String, tokio::task::JoinHandle<()>)> {
    let client = reqwest::Client::new();
    let app = axum::Router::new().route(
        "/feed",
        axum::routing::post(move |headers: HeaderMap, Json(data): Json<Value>| {
            let client = client.clone();
            async move {
                let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
                if header("feed-gate").unwrap_or("0") == "0" {
                    // Pretend to OCR and classify.
                    tokio::time::sleep(Duration::from_millis(100 + rand::random::<u64>() % 200))
                        .await;
                    let skills = data["skills"].as_array().map_or(0, Vec::len) as i64;
                    let score = skills * 10 + data["years"].as_i64().unwrap_or(0) * 3;
                    let mut out = data.clone();
                    out["score"] = json!(score);
                    return Json(json!({"done": true, "data": out}));
                }
                let Some(url) = header("feed-inputs") else {
                    let message = "no Feed-Inputs: the processor serves inputs on its listener";
                    return Json(json!({"error": {"message": message, "no_retry": true}}));
                };
                let n = data["pick"].as_u64().unwrap_or(10) as usize;
                match rank(&client, url, n).await {
                    Ok((top, ranked)) => {
                        Json(json!({"done": true, "data": {"top": top, "ranked": ranked}}))
                    }
                    Err(message) => Json(json!({"error": {"message": message}})),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| crate::Error::Invalid(format!("cannot start the demo handler: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| crate::Error::Invalid(e.to_string()))?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((format!("http://{addr}/feed"), task))
}

/// The `n` best classified resumes among the inputs at `url` (following
/// `Link: <…>; rel="next"` from page to page), best first, and how many
/// there were; only the best `n` are held.
async fn rank(
    client: &reqwest::Client,
    url: &str,
    n: usize,
) -> std::result::Result<(Vec<Value>, usize), String> {
    let mut top: Vec<(i64, String)> = Vec::with_capacity(n + 1);
    let mut ranked = 0;
    let mut next = Some(url.to_string());
    while let Some(url) = next.take() {
        let mut r = client.get(&url).send().await.map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("reading the inputs: HTTP {}", r.status()));
        }
        next = next_link(r.headers());
        let mut pending = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(|e| e.to_string())? {
            pending.extend_from_slice(&chunk);
            while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=at).collect();
                let input: Value = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
                if input["status"] != "complete" {
                    continue;
                }
                let data = &input["data"];
                let name = data["candidate"].as_str().unwrap_or("?").to_string();
                top.push((data["score"].as_i64().unwrap_or(0), name));
                top.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                top.truncate(n);
                ranked += 1;
            }
        }
    }
    let top = top
        .into_iter()
        .map(|(s, c)| json!({"candidate": c, "score": s}))
        .collect();
    Ok((top, ranked))
}

/// The target of `Link: <url>; rel="next"`, if the answer has one.
fn next_link(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    let (target, params) = link.strip_prefix('<')?.split_once('>')?;
    params.contains("rel=\"next\"").then(|| target.to_string())
}
