//! What an enqueue costs the serving process: 16 MiB bodies of every shape
//! (refused at their first item, refused past the item cap, accepted as
//! many items or as one), one at a time and eight at once, measured as the
//! process's peak RSS (VmHWM from /proc).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use feed::console::{MAX_ENQUEUE_BODY_BYTES, MAX_ENQUEUE_ITEMS};

use crate::on_all_backends;
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

/// Bodies of just under 16 MiB: (what, body, the status it answers).
fn bodies(n: usize) -> Vec<(&'static str, String, u16)> {
    let cap = MAX_ENQUEUE_BODY_BYTES - 64;
    // An array of 8 million zeros: no item is an object.
    let zeros = format!("[{}0]", "0,".repeat(cap / 2 - 2));
    // 1.5 million tiny items: far past the item cap.
    let tiny = "{\"data\":0}\n".repeat(cap / 11);
    // The most items a request may hold, 16 MiB in all.
    let size = cap / MAX_ENQUEUE_ITEMS - 40;
    let item = |i: usize| {
        format!(
            "{{\"id\":\"m{n}-{i:05}\",\"data\":\"{}\"}}\n",
            "x".repeat(size)
        )
    };
    let many: String = (0..MAX_ENQUEUE_ITEMS).map(item).collect();
    // One item of 16 MiB.
    let one = format!(
        "{{\"id\":\"m{n}-one\",\"data\":\"{}\"}}",
        "y".repeat(cap - 40)
    );
    for b in [&zeros, &tiny, &many, &one] {
        assert!(b.len() <= MAX_ENQUEUE_BODY_BYTES && b.len() > 15 << 20);
    }
    vec![
        ("zeros", zeros, 400),
        ("tiny items", tiny, 413),
        ("the most items", many, 200),
        ("one item", one, 200),
    ]
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

on_all_backends!(enqueue_memory_is_bounded);
async fn enqueue_memory_is_bounded(db: TestDb) {
    let ui = Ui::start(&db).await;
    let idle = ui.peak();
    // One at a time, then eight at once.
    for (what, body, want) in bodies(0) {
        let (code, text) = post(&ui.base, format!("one-{what}"), body).await;
        assert_eq!(code, want, "{what}: {text}");
        println!("after one {what}: {:.0} MiB", ui.peak());
    }
    let single = ui.peak();
    for shape in 0..4 {
        let mut sends = Vec::new();
        for n in 1..=8 {
            let (what, body, want) = bodies(n).swap_remove(shape);
            let base = ui.base.clone();
            sends.push(tokio::spawn(async move {
                let (code, text) = post(&base, format!("eight-{what}"), body).await;
                assert_eq!(code, want, "{what}: {text}");
            }));
        }
        for s in sends {
            s.await.unwrap();
        }
        println!("after eight at once of shape {shape}: {:.0} MiB", ui.peak());
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
