//! The book's examples, run as written and in the order a reader runs
//! them, in one folder with the SQLite default: the quick start (and
//! stopping it), the round trip of "Knowing when work is done" (and
//! stopping it), then the handler examples in Python and Node (their
//! ranking reads its inputs through `Feed-Inputs`). What each page shows
//! as output must be what the run printed.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::book::blocks;

const QUICK: &str = include_str!("../../docs/book/src/getting-started.md");
const DONE: &str = include_str!("../../docs/book/src/done.md");
const EXAMPLES: &str = include_str!("../../docs/book/src/handler/examples.md");

/// The block of `lang` in `page` that holds `marker`.
fn block(page: &'static str, lang: &str, marker: &str) -> &'static str {
    blocks(page, lang)
        .into_iter()
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("no {lang} block with {marker:?}"))
}

/// Whether `node` runs here; in CI it must.
fn node() -> bool {
    let found = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found && std::env::var_os("CI").is_some() {
        panic!("the book's Node example needs node in CI (apt-get install nodejs)");
    }
    if !found {
        eprintln!("skipping the Node example: no node here");
    }
    found
}

#[test]
#[ignore = "slow tier: cargo test --workspace --tests -- --ignored"]
fn the_books_examples_run_as_written() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (QUICK, "python", "# handler.py"),
        (DONE, "python", "# events.py"),
        (EXAMPLES, "python", "# gates.py"),
        (EXAMPLES, "js", "// gates.mjs"),
    ];
    for (page, lang, marker) in files {
        let name = marker.trim_start_matches(['#', '/', ' ']);
        std::fs::write(dir.path().join(name), block(page, lang, marker)).unwrap();
    }
    let out = dir.path().join("out.txt");
    let try_it = block(EXAMPLES, "sh", "python3 gates.py");
    let mut steps = vec![
        block(QUICK, "sh", "processor enqueue --partition folder-1"),
        block(QUICK, "sh", "kill $PROCESSOR $HANDLER; wait"),
        block(DONE, "sh", "folder-7"),
        // The reader stops once events.py has printed the close's event.
        "until grep -q '\"partition_id\":\"folder-7\"' out.txt; do sleep 0.1; done\n",
        block(DONE, "sh", "kill $PROCESSOR $HANDLER $EVENTS; wait"),
        try_it,
    ];
    let node_try = try_it
        .replace("python3 gates.py", "node gates.mjs")
        .replace("folder-2", "folder-3");
    let node = node();
    if node {
        steps.push(&node_try);
    }
    let script = steps.join("\n");
    std::fs::write(dir.path().join("run.sh"), format!("set -e\n{script}")).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_processor"))
        .parent()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut child = std::process::Command::new("bash")
        .arg("run.sh")
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("FEED_DATABASE_URL")
        .env_remove("FEED_PRODUCER_TOKEN")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(dir.path().join("err.txt")).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    /// Ends the script's process group (its servers too), also on a panic.
    struct Group(String);
    impl Drop for Group {
        fn drop(&mut self) {
            let g = format!("-{}", self.0);
            let _ = std::process::Command::new("kill")
                .args(["-TERM", "--", &g])
                .status();
        }
    }
    let group = Group(child.id().to_string());
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(group);
    let _ = child.wait();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let err = std::fs::read_to_string(dir.path().join("err.txt")).unwrap_or_default();
    let tail: String = err.lines().rev().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        status.is_some_and(|s| s.success()),
        "the examples did not run to the end ({status:?}); they printed:\n{text}\nstderr, last lines first:\n{tail}"
    );
    let mut shown = vec![
        (
            QUICK,
            "partition folder-1 complete: 3 complete, 0 failed, 0 cancelled, 0 available",
        ),
        (
            QUICK,
            "folder-1    complete   1      -       0: 0/2/0  1: 0/1/0",
        ),
        (DONE, "\"ids\":[\"f7/1\",\"f7/2\"]"),
        (
            DONE,
            "partition folder-7 complete: 2 complete, 0 failed, 0 cancelled, 0 available",
        ),
        (
            DONE,
            "{\"id\":\"f7/2\",\"gate\":0,\"status\":\"complete\",\"attempts\":1,\"last_error\":null,\"data\":{\"resume\": 2, \"seen_at_gate\": 0}}",
        ),
        (
            DONE,
            "2 {\"id\":2,\"event\":\"partition.complete\",\"partition_id\":\"folder-7\",\"gate\":0,\"counts\":{\"available\":0,\"complete\":2,\"failed\":0,\"cancelled\":0}",
        ),
        (DONE, "folder-1, id 1"),
        (
            EXAMPLES,
            "partition folder-2 complete: 3 complete, 1 failed, 0 cancelled, 0 available",
        ),
        (
            EXAMPLES,
            "\"gate\":1,\"status\":\"complete\",\"attempts\":1,\"last_error\":null,\"data\":{\"top\": [{\"resume\": \"Grace\", \"score\": 5}, {\"resume\": \"Ada\", \"score\": 3}]}}",
        ),
    ];
    if node {
        shown.push((
            EXAMPLES,
            "{\"top\":[{\"resume\":\"Grace\",\"score\":5},{\"resume\":\"Ada\",\"score\":3}]}",
        ));
    }
    for (page, line) in shown {
        assert!(page.contains(line), "the book does not show {line}");
        let printed = if line == "folder-1, id 1" {
            text.contains(
                "1 {\"id\":1,\"event\":\"partition.complete\",\"partition_id\":\"folder-1\"",
            )
        } else {
            text.contains(line)
        };
        assert!(printed, "the book shows {line}; the run printed:\n{text}");
    }
}
