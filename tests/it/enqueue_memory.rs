//! What an enqueue costs the serving process: 16 MiB bodies of every shape
//! (refused at their first item, refused past the item cap, accepted as
//! many items or as one), one at a time and eight at once, measured as the
//! process's peak RSS (VmHWM from /proc).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use feed::console::{MAX_ENQUEUE_BODY_BYTES, MAX_ENQUEUE_ITEMS};

use crate::slow;
use crate::support::{TestDb, free_port, wait_for};

const PRODUCER: &str = "test-producer-token-9876543210";

/// `processor ui` serving the enqueue API, killed when dropped.
struct Ui {
    child: Child,
    base: String,
}

impl Ui {
    async fn start(db: &TestDb) -> Ui {
        let listen = format!("127.0.0.1:{}", free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_processor"))
            .args(["ui", "--database-url", &db.url, "--listen", &listen])
            .args(["--producer-token", PRODUCER])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://{listen}");
        let health = format!("{base}/api/v1/status");
        wait_for("the console", Duration::from_secs(30), || async {
            reqwest::get(&health).await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        Ui { child, base }
    }

    /// VmHWM, in MiB.
    fn peak(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kb / 1024.0
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shapes of body sent: (what, the status it answers).
const SHAPES: [(&str, u16); 4] = [
    // An array of 8 million zeros: no item is an object.
    ("zeros", 400),
    // 1.5 million tiny items: far past the item cap.
    ("tiny items", 413),
    // The most items a request may hold, 16 MiB in all.
    ("the most items", 200),
    // One item of 16 MiB.
    ("one item", 200),
];

/// A body of just under 16 MiB of the shape `SHAPES[shape]`, its ids
/// marked with `n`.
fn body(shape: usize, n: usize) -> String {
    let cap = MAX_ENQUEUE_BODY_BYTES - 64;
    let body = match shape {
        0 => format!("[{}0]", "0,".repeat(cap / 2 - 2)),
        1 => "{\"data\":0}\n".repeat(cap / 11),
        2 => {
            let data = "x".repeat(cap / MAX_ENQUEUE_ITEMS - 40);
            (0..MAX_ENQUEUE_ITEMS)
                .map(|i| format!("{{\"id\":\"m{n}-{i:05}\",\"data\":\"{data}\"}}\n"))
                .collect()
        }
        _ => format!(
            "{{\"id\":\"m{n}-one\",\"data\":\"{}\"}}",
            "y".repeat(cap - 40)
        ),
    };
    assert!(body.len() <= MAX_ENQUEUE_BODY_BYTES && body.len() > 15 << 20);
    body
}

async fn post(base: &str, partition: String, body: String) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/partitions/{partition}/items"))
        .bearer_auth(PRODUCER)
        .body(body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let text = r.text().await.unwrap();
    (code, text.chars().take(300).collect())
}

slow!(enqueue_memory_is_bounded);
async fn enqueue_memory_is_bounded(db: TestDb) {
    let ui = Ui::start(&db).await;
    let idle = ui.peak();
    // One at a time, then eight at once.
    for (shape, (what, want)) in SHAPES.into_iter().enumerate() {
        let (code, text) = post(&ui.base, format!("one-{what}"), body(shape, 0)).await;
        assert_eq!(code, want, "{what}: {text}");
    }
    let single = ui.peak();
    for (shape, (what, want)) in SHAPES.into_iter().enumerate() {
        let mut sends = Vec::new();
        for n in 1..=8 {
            let (base, body) = (ui.base.clone(), body(shape, n));
            sends.push(tokio::spawn(async move {
                let (code, text) = post(&base, format!("eight-{what}"), body).await;
                assert_eq!(code, want, "{what}: {text}");
            }));
        }
        for s in sends {
            s.await.unwrap();
        }
    }
    let peak = ui.peak();
    println!(
        "peak RSS: idle {idle:.0} MiB, one at a time {single:.0} MiB, eight at once {peak:.0} MiB"
    );
    assert!(
        peak < 256.0,
        "peak RSS {peak:.0} MiB (one at a time: {single:.0} MiB)"
    );
    let written = db.count("SELECT COUNT(*) AS n FROM feed_items").await;
    assert_eq!(
        written,
        9 * (MAX_ENQUEUE_ITEMS as i64 + 1),
        "the accepted bodies were written"
    );
}
