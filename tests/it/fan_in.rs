//! A fan-in step gets its inputs (the book: Writing a handler, Inputs):
//! every delivery at a gate above 0 carries `Feed-Inputs` (a batch:
//! `"inputs"` per item), a URL on the processor's listener that serves the
//! partition's items at the gates below as JSON lines, page by page. A
//! handler with no state sums 10,000 results through it; the URL opens its
//! own partition at its own gate until it expires, and nothing else;
//! without a listener no URL is sent; 100,000 inputs of 1 KiB stream
//! through a processor that stays small.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use feed::store::{NewItem, PartitionSpec};
use serde_json::{Value, json};

use crate::support::{Call, Handler, Proc, Spawned, TestDb, json as reply, wait_for};
use crate::{backend_tests, behaviour};

/// The target of `Link: <url>; rel="next"`, if the answer has one.
fn next_link(r: &reqwest::Response) -> Option<String> {
    let link = r.headers().get("link")?.to_str().ok()?;
    let (target, params) = link.strip_prefix('<')?.split_once('>')?;
    assert_eq!(params, "; rel=\"next\"", "{link}");
    Some(target.to_string())
}

/// Reads the inputs at `url` and every page after it (following `Link`),
/// calling `each` per line as it arrives; the number of pages. Holds one
/// chunk at a time, never a page.
pub(crate) async fn read_inputs(url: &str, mut each: impl FnMut(&[u8])) -> usize {
    let client = reqwest::Client::new();
    let (mut next, mut pages) = (Some(url.to_string()), 0);
    while let Some(url) = next.take() {
        let mut r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        assert_eq!(r.headers()["content-type"], "application/x-ndjson");
        next = next_link(&r);
        pages += 1;
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = r.chunk().await.unwrap() {
            pending.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(at) = pending[start..].iter().position(|&b| b == b'\n') {
                each(&pending[start..start + at]);
                start += at + 1;
            }
            pending.drain(..start);
        }
        assert!(pending.is_empty(), "every line ends with a newline");
    }
    pages
}

/// The inputs at `url` (every page), parsed.
async fn inputs(url: &str) -> Vec<Value> {
    let mut out = Vec::new();
    read_inputs(url, |l| out.push(serde_json::from_slice(l).unwrap())).await;
    out
}

/// A GET of `url`: its status and JSON body (Null when not JSON).
async fn get(url: &str) -> (u16, Value) {
    let r = reqwest::get(url).await.unwrap();
    let code = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The error message of a refusal in the API's JSON shape.
fn refused(code: u16, body: &Value, want: u16) -> String {
    assert_eq!(code, want, "{body}");
    let message = body["error"]["message"].as_str();
    message
        .unwrap_or_else(|| panic!("not the API's error shape: {body}"))
        .to_string()
}

/// The value a gate-0 step gives input `n`.
fn value(n: i64) -> i64 {
    3 * n + 1
}

behaviour!(a_stateless_handler_sums_its_inputs);
/// 10,000 items at gate 0 each answer a value; the item at gate 1 reads
/// them all through `Feed-Inputs` (pages of 999, so eleven of them, one
/// after the other through `Link`) and gets the exact total. The handler
/// holds nothing between calls; no gate-0 request carries the header.
async fn a_stateless_handler_sums_its_inputs(db: TestDb) {
    const N: i64 = 10_000;
    let mut items: Vec<NewItem> = (0..N)
        .map(|n| {
            NewItem::new(json!({ "n": n }).to_string().into_bytes())
                .with_id(format!("in-{n:05}"))
                .at_gate(0)
        })
        .collect();
    items.push(NewItem::new(b"{}".to_vec()).with_id("sum").at_gate(1));
    db.store
        .enqueue("sums", &PartitionSpec::default(), items)
        .await
        .unwrap();
    // Eleven pages beside other tests may take more than FAST's 5 s.
    let slow = ["--request-timeout", "60s"];
    let Spawned(h, p) = Spawned::start_async(&db, &slow, |c: Call| async move {
        if c.gate == 0 {
            let n = c.data["n"].as_i64().unwrap();
            return reply(200, json!({"done": true, "data": {"n": n, "value": value(n)}}));
        }
        let Some(url) = c.header("feed-inputs") else {
            return reply(200, json!({"error": {"message": "no Feed-Inputs", "no_retry": true}}));
        };
        let (mut sum, mut count, mut ordered) = (0, 0, true);
        let pages = read_inputs(&format!("{url}&limit=999"), |line| {
            let input: Value = serde_json::from_slice(line).unwrap();
            ordered &= input["data"]["n"] == count && input["gate"] == 0;
            ordered &= input["status"] == "complete";
            sum += input["data"]["value"].as_i64().unwrap();
            count += 1;
        })
        .await;
        reply(
            200,
            json!({"done": true, "data": {"sum": sum, "count": count, "pages": pages, "ordered": ordered}}),
        )
    })
    .await;
    // 10,000 real deliveries first: beside other tests, more than the
    // minute `wait_partition` gives.
    wait_for(
        "partition sums complete",
        Duration::from_secs(300),
        || async { db.partition_status("sums").await == "complete" },
    )
    .await;
    let got: Value =
        serde_json::from_slice(&db.store.item_data(None, "sum").await.unwrap()).unwrap();
    let want: i64 = (0..N).map(value).sum();
    assert_eq!(
        got,
        json!({"sum": want, "count": N, "pages": 11, "ordered": true})
    );
    let calls = h.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.gate == 1 || c.header("feed-inputs").is_none())
    );
    let url = calls
        .iter()
        .find(|c| c.gate == 1)
        .unwrap()
        .header("feed-inputs");
    let base = format!(
        "http://{}/inputs/sums?gate=1&expires=",
        p.listen.as_ref().unwrap()
    );
    assert!(url.unwrap().starts_with(&base), "{url:?}");
}

/// The `"inputs"` URL of each item of the batch requests in `calls`, by
/// item id (None for an item without one).
fn batch_urls(calls: &[Call]) -> Vec<(String, Option<String>)> {
    calls
        .iter()
        .flat_map(|c| c.data.as_array().cloned().unwrap_or_default())
        .map(|i| {
            let url = i.get("inputs").map(|u| u.as_str().unwrap().to_string());
            (i["id"].as_str().unwrap().to_string(), url)
        })
        .collect()
}

behaviour!(an_inputs_url_opens_its_partition_at_its_gate);
/// Batches carry each item's URL in its object. A URL serves its own
/// partition's items below its gate, with their latest data and status,
/// from `after`; the same URL for another partition, another gate, with
/// its expiry or token changed, or without its token is refused in the
/// API's error shape, and so are a bad `limit`, `after` or parameter.
async fn an_inputs_url_opens_its_partition_at_its_gate(db: TestDb) {
    db.partition("pa", true, false, "continue").await;
    db.partition("pb", true, false, "block").await;
    for (id, part, gate) in [
        ("a1", "pa", 0),
        ("a2", "pa", 0),
        ("a3", "pa", 0),
        ("a-rank", "pa", 1),
        ("a-last", "pa", 2),
        ("b1", "pb", 0),
        ("b-rank", "pb", 1),
    ] {
        db.item(id, part, gate, json!({"id": id})).await;
    }
    let Spawned(h, _p) = Spawned::start(&db, &["--batch-size", "4", "--inputs-ttl", "10m"], |c| {
        let answers: Vec<Value> = c
            .data
            .as_array()
            .unwrap()
            .iter()
            .map(|i| match i["id"].as_str().unwrap() {
                "a2" => json!({"error": {"message": "no", "no_retry": true}}),
                id => json!({"done": true, "data": {"id": id, "seen": true}}),
            })
            .collect();
        reply(200, Value::Array(answers))
    })
    .await;
    db.wait_partition("pa", "complete").await;
    db.wait_partition("pb", "complete").await;
    let urls = batch_urls(&h.calls());
    let url = |id: &str| {
        let found = urls.iter().find(|(i, _)| i == id).unwrap();
        found
            .1
            .clone()
            .unwrap_or_else(|| panic!("{id} has no inputs URL"))
    };
    for (id, u) in &urls {
        let gate0 = ["a1", "a2", "a3", "b1"].contains(&id.as_str());
        assert_eq!(u.is_none(), gate0, "{id}: {u:?}");
    }

    // Its own partition, the gates below, latest data, write order.
    let line = |id: &str, gate: i64, status: &str, data: Value| json!({"id": id, "gate": gate, "status": status, "data": data});
    let a_inputs = vec![
        line("a1", 0, "complete", json!({"id": "a1", "seen": true})),
        line("a2", 0, "failed", json!({"id": "a2"})),
        line("a3", 0, "complete", json!({"id": "a3", "seen": true})),
    ];
    assert_eq!(inputs(&url("a-rank")).await, a_inputs);
    let mut below_2 = a_inputs.clone();
    below_2.push(line(
        "a-rank",
        1,
        "complete",
        json!({"id": "a-rank", "seen": true}),
    ));
    assert_eq!(inputs(&url("a-last")).await, below_2);
    assert_eq!(
        inputs(&url("b-rank")).await,
        vec![line("b1", 0, "complete", json!({"id": "b1", "seen": true}))]
    );
    // A cursor and a limit: the page after a1, one at a time.
    let rank = url("a-rank");
    assert_eq!(inputs(&format!("{rank}&after=a1")).await, a_inputs[1..]);
    let r = reqwest::get(format!("{rank}&limit=1")).await.unwrap();
    let next = next_link(&r).expect("a next page");
    assert!(next.ends_with("&after=a1&limit=1"), "{next}");
    assert_eq!(inputs(&format!("{rank}&limit=1")).await, a_inputs);
    let last = reqwest::get(format!("{rank}&after=a2&limit=1"))
        .await
        .unwrap();
    assert_eq!(next_link(&last), None, "a3 is the last");

    // Another partition, another gate, a changed expiry or token: 403.
    let (path, query) = rank.split_once('?').unwrap();
    let (expires, token) = query
        .strip_prefix("gate=1&expires=")
        .unwrap()
        .split_once("&token=")
        .unwrap();
    let later: i64 = expires.parse::<i64>().unwrap() + 60_000;
    let mut flipped = token.to_string();
    let c = if flipped.ends_with('A') { "B" } else { "A" };
    flipped.replace_range(42.., c);
    for (what, forged) in [
        (
            "another partition",
            rank.replace("/inputs/pa?", "/inputs/pb?"),
        ),
        (
            "another gate",
            format!("{path}?gate=2&expires={expires}&token={token}"),
        ),
        (
            "gate 0",
            format!("{path}?gate=0&expires={expires}&token={token}"),
        ),
        (
            "a later expiry",
            format!("{path}?gate=1&expires={later}&token={token}"),
        ),
        (
            "a changed token",
            format!("{path}?gate=1&expires={expires}&token={flipped}"),
        ),
        (
            "b-rank's token",
            rank.replace(token, url("b-rank").rsplit_once("&token=").unwrap().1),
        ),
    ] {
        let (code, body) = get(&forged).await;
        let message = refused(code, &body, 403);
        assert!(
            message.contains("does not open partition"),
            "{what}: {message}"
        );
    }
    // No token, no expiry: 401.
    for bare in [path.to_string(), format!("{path}?gate=1&expires={expires}")] {
        let (code, body) = get(&bare).await;
        let message = refused(code, &body, 401);
        assert!(
            message.contains("carries gate, expires and token"),
            "{message}"
        );
    }
    // A page the reader asks for wrongly: 400.
    for (bad, says) in [
        ("limit=0", "limit 0 is out of range: 1 to 100000"),
        ("limit=100001", "out of range"),
        ("after=b1", "partition \"pa\" has no item \"b1\""),
        ("color=red", "unknown field `color`"),
    ] {
        let (code, body) = get(&format!("{rank}&{bad}")).await;
        let message = refused(code, &body, 400);
        assert!(message.contains(says), "{bad}: {message}");
    }
}

behaviour!(an_inputs_url_expires);
/// With its time to live shortened (a hidden setting, 3 s here), a URL
/// that opened its inputs during the call is refused once it has expired,
/// with 401 and a message that says so.
async fn an_inputs_url_expires(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("first", "p", 0, json!({})).await;
    db.item("then", "p", 1, json!({})).await;
    let Spawned(h, _p) = Spawned::start_async(&db, &["--inputs-ttl", "3s"], |c: Call| async move {
        let Some(url) = c.header("feed-inputs") else {
            return reply(200, json!({"done": true}));
        };
        let (code, body) = get(url).await;
        reply(
            200,
            json!({"done": true, "data": {"code": code, "body": body}}),
        )
    })
    .await;
    db.wait_partition("p", "complete").await;
    let read: Value =
        serde_json::from_slice(&db.store.item_data(None, "then").await.unwrap()).unwrap();
    assert_eq!(
        read["code"], 200,
        "the URL opened its inputs in the call: {read}"
    );
    let url = h.calls_for("then")[0]
        .header("feed-inputs")
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (code, body) = loop {
        let (code, body) = get(&url).await;
        if code != 200 || Instant::now() > deadline {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let message = refused(code, &body, 401);
    assert!(message.contains("this inputs URL expired"), "{message}");
}

behaviour!(no_listener_no_inputs);
/// `--listen off` sends no `Feed-Inputs` and says so at start; so does
/// `--inputs-url off`, with a listener.
async fn no_listener_no_inputs(db: TestDb) {
    db.partition("p", true, false, "block").await;
    db.item("first", "p", 0, json!({})).await;
    db.item("then", "p", 1, json!({})).await;
    let h = Handler::start(|_| reply(200, json!({"done": true}))).await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut off = Command::new(env!("CARGO_BIN_EXE_processor"))
        .args(["run", "--database-url", &db.url, "--handler-url", &h.url()])
        .args(["--listen", "off", "--poll-interval", "50ms"])
        .env("RUST_LOG", "info")
        .env_remove("FEED_INPUTS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    db.wait_partition("p", "complete").await;
    let _ = off.kill();
    let _ = off.wait();
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        text.contains("fan-in inputs are off: --listen is off"),
        "{text}"
    );
    assert!(h.calls_for("then")[0].header("feed-inputs").is_none());
    // With a listener, but told not to.
    db.partition("q", true, false, "block").await;
    db.item("q-first", "q", 0, json!({})).await;
    db.item("q-then", "q", 1, json!({})).await;
    let q = Proc::start(&db, &h.url(), &["--inputs-url", "off"]);
    db.wait_partition("q", "complete").await;
    assert!(h.calls_for("q-then")[0].header("feed-inputs").is_none());
    drop(q);
}

backend_tests!(serving_100k_inputs_stays_small: sqlite => Sqlite [slow], postgres => Postgres [slow]);
/// 100,000 inputs of 1 KiB (100 MiB of data, written with plain SQL) read
/// through one URL, page after page: the processor's peak RSS stays under
/// 256 MiB. Prints the time the read took and the peak, for the book's
/// Performance chapter.
async fn serving_100k_inputs_stays_small(db: TestDb) {
    const N: usize = 100_000;
    const ROWS: usize = 500;
    db.exec(
        "INSERT INTO feed_partitions (id, gate) VALUES ('big', 1)",
        vec![],
    )
    .await;
    let data = format!("\"{}\"", "x".repeat(1022)).into_bytes();
    for chunk in 0..N / ROWS {
        let rows = vec!["(?, 'big', 0, 'complete', ?)"; ROWS].join(", ");
        let mut values: Vec<sea_orm::Value> = Vec::with_capacity(2 * ROWS);
        for k in chunk * ROWS..(chunk + 1) * ROWS {
            values.push(format!("in-{k:06}").into());
            values.push(data.clone().into());
        }
        let sql =
            format!("INSERT INTO feed_items (id, partition_id, gate, status, data) VALUES {rows}");
        db.exec(&sql, values).await;
    }
    db.item("rank", "big", 1, json!({})).await;
    // The URL is read after the call, so it must outlive it.
    let Spawned(h, p) = Spawned::start(&db, &["--inputs-ttl", "10m"], |_| {
        reply(200, json!({"done": true}))
    })
    .await;
    db.wait_partition("big", "complete").await;
    let url = h.calls_for("rank")[0]
        .header("feed-inputs")
        .unwrap()
        .to_string();
    let (_, before) = p.memory();
    let started = Instant::now();
    let (mut count, mut bytes) = (0, 0);
    let pages = read_inputs(&url, |line| {
        count += 1;
        bytes += line.len();
    })
    .await;
    let took = started.elapsed();
    let (_, peak) = p.memory();
    let (before, peak) = (before.unwrap(), peak.unwrap());
    eprintln!(
        "{:?}: {N} inputs of 1 KiB, {pages} pages, {} MiB of lines in {:.2} s; processor peak RSS {before:.1} MiB before, {peak:.1} MiB after",
        db.backend,
        bytes >> 20,
        took.as_secs_f64()
    );
    assert_eq!((count, pages), (N, 10));
    assert!(peak < 256.0, "peak RSS {peak:.1} MiB");
}
