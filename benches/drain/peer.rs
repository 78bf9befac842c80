//! The peer phase: graphile-worker (Node.js, pinned versions installed
//! from npm under the bench's output directory) drains the same number of
//! jobs through the same handler on PostgreSQL, so that Feed's figure is
//! compared with a peer's measured in the same run on the same machine.
//! The peer runs at its best (see `peer.js`): undici's `Pool` for the
//! POSTs, `addJobs` in chunks, the settings of its performance page.
//! Skipped, with a message, when Node.js or npm is absent.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use testkit::{Backend, Database};

use crate::Args;
use crate::handler::Handler;

/// The graphile-worker release measured.
pub(crate) const GRAPHILE_WORKER: &str = "0.17.3";
/// The HTTP client it posts with (the last release for Node.js 20).
const UNDICI: &str = "7.30.2";

/// What the peer's script reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PeerRun {
    pub(crate) jobs: usize,
    /// Enqueuing every job (`addJobs` in chunks), before the worker starts.
    pub(crate) enqueue_s: f64,
    pub(crate) drain_s: f64,
    pub(crate) jobs_per_s: f64,
    /// CPU seconds of the Node.js worker during the drain.
    pub(crate) cpu_s: f64,
    /// Share of the machine's CPU time that was busy during the drain.
    pub(crate) busy_share: f64,
    /// Its settings, as the script ran it.
    pub(crate) settings: serde_json::Value,
}

/// Runs graphile-worker once; Ok(None) when Node.js is absent.
pub(crate) async fn graphile(
    args: &Args,
    dir: &Path,
    handler: &Handler,
    jobs: usize,
    concurrency: usize,
) -> Result<Option<PeerRun>> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        println!("  peer: skipped: Node.js is not installed (node not found)");
        return Ok(None);
    }
    let dir = dir.join("peer");
    install(&dir)?;
    std::fs::write(dir.join("peer.js"), include_str!("peer.js"))?;
    let db = Database::create(Backend::Postgres, &args.servers(), "feed_peer_", 1).await?;
    let out = tokio::process::Command::new("node")
        .arg("peer.js")
        .args([
            &db.url,
            &handler.url(),
            &jobs.to_string(),
            &concurrency.to_string(),
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(args.timeout * 2), out).await;
    db.drop_db().await;
    let out = out.context("graphile-worker timed out")??;
    if !out.status.success() {
        bail!(
            "graphile-worker failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    Ok(Some(
        serde_json::from_str(line).with_context(|| format!("peer output: {text}"))?,
    ))
}

/// `npm install graphile-worker@<pinned> undici@<pinned>` into `dir`, once.
fn install(dir: &Path) -> Result<()> {
    let installed = |package: &str, version: &str| {
        let marker = dir.join(format!("node_modules/{package}/package.json"));
        std::fs::read_to_string(marker)
            .unwrap_or_default()
            .contains(&format!("\"version\": \"{version}\""))
    };
    if installed("graphile-worker", GRAPHILE_WORKER) && installed("undici", UNDICI) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("package.json"), "{\"private\": true}\n")?;
    println!(
        "  peer: installing graphile-worker {GRAPHILE_WORKER} and undici {UNDICI} with npm into {}",
        dir.display()
    );
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--save-exact"])
        .arg(format!("graphile-worker@{GRAPHILE_WORKER}"))
        .arg(format!("undici@{UNDICI}"))
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .context("running npm")?;
    if !status.success() {
        bail!("npm install graphile-worker@{GRAPHILE_WORKER} undici@{UNDICI} failed ({status})");
    }
    Ok(())
}
