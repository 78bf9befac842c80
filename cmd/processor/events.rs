//! The other end of the pipe: `wait` (block until a partition is
//! finished), `export` (its items as JSON lines) and `events` (the
//! completion events: list them, retry failed deliveries).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use feed::store::events::EventScope;

use super::{DbArgs, connect, duration};

#[derive(Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The partition to wait for
    #[arg(long)]
    pub partition: String,
    /// Give up after this long (exit 3) [default: wait forever]
    #[arg(long, value_parser = duration)]
    pub timeout: Option<humantime::Duration>,
    /// How often to look at the partition; on PostgreSQL a notification wakes the wait at once
    /// and this is the safety net
    #[arg(long, value_parser = duration, default_value = "500ms")]
    pub poll_interval: humantime::Duration,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The partition whose items to write
    #[arg(long)]
    pub partition: String,
    /// Only items with this status
    #[arg(long)]
    pub status: Option<String>,
    /// Only items at this gate
    #[arg(long)]
    pub gate: Option<i64>,
}

#[derive(Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Subcommand)]
pub enum EventsCommand {
    /// List events, oldest first.
    List(EventListArgs),
    /// Send failed events again, with fresh attempts.
    Retry(EventRetryArgs),
    /// Print the events secret that goes with the signing secret: what an
    /// events receiver verifies with when no --events-signing-secret is given
    /// (one line per secret during a rotation).
    Secret(EventSecretArgs),
}

#[derive(Args)]
pub struct EventSecretArgs {
    #[command(flatten)]
    pub signing_secret: crate::run_flags::SigningSecretArgs,
}

#[derive(Args)]
pub struct EventListArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Only this partition's events
    #[arg(long)]
    pub partition: Option<String>,
    /// Only events in this delivery state: pending, delivered or failed
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print JSON lines instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["partition", "id", "all"])))]
pub struct EventRetryArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Only this partition's failed events
    #[arg(long)]
    pub partition: Option<String>,
    /// Only this event
    #[arg(long)]
    pub id: Option<i64>,
    /// Every failed event
    #[arg(long)]
    pub all: bool,
}

/// Exit codes of `wait`, by outcome.
const COMPLETE: u8 = 0;
const FAILED: u8 = 1;
const CANCELLED: u8 = 2;
const TIMED_OUT: u8 = 3;
/// The wait itself failed (unknown partition, database unreachable).
const ERROR: u8 = 4;

pub async fn wait(a: WaitArgs) -> ExitCode {
    let waited = async {
        let store = connect(&a.db).await?;
        let timeout = a.timeout.map(Duration::from);
        let w = store
            .wait(&a.partition, timeout, a.poll_interval.into())
            .await?;
        // Why it did not complete, as far as the database shows; a failure
        // to read that leaves the outcome as it is.
        let why = match w.status.as_str() {
            "complete" | "cancelled" => Vec::new(),
            _ => match store.status(Some(&a.partition)).await {
                Ok(s) => crate::wait_hints::hints(&a.partition, &w, &s),
                Err(_) => Vec::new(),
            },
        };
        Ok::<_, anyhow::Error>((w, why))
    };
    let (w, why) = match waited.await {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {}", crate::status::clean(&format!("{e:#}")));
            return ExitCode::from(ERROR);
        }
    };
    let code = match (w.finished, w.status.as_str()) {
        (false, _) => TIMED_OUT,
        (true, "complete") => COMPLETE,
        (true, "failed") => FAILED,
        _ => CANCELLED,
    };
    let c = w.counts;
    if a.json {
        let out = serde_json::json!({
            "partition": a.partition,
            "status": w.status,
            "finished": w.finished,
            "counts": c,
        });
        println!("{out}");
    } else {
        let state = if w.finished {
            w.status.clone()
        } else {
            format!("not finished ({}) when the wait timed out", w.status)
        };
        println!(
            "partition {} {state}: {} complete, {} failed, {} cancelled, {} available",
            crate::status::clean(&a.partition),
            c.complete,
            c.failed,
            c.cancelled,
            c.available
        );
    }
    for line in why {
        eprintln!("{line}");
    }
    ExitCode::from(code)
}

pub async fn export(a: ExportArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let mut export = store.export(&a.partition, a.status.as_deref(), a.gate)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    while let Some(page) = export.next_page().await? {
        for item in &page {
            writeln!(out, "{}", feed::lines::export_line(item))?;
        }
    }
    out.flush()?;
    Ok(())
}

pub async fn events(a: EventsArgs) -> anyhow::Result<()> {
    match a.command {
        EventsCommand::List(a) => list(a).await,
        EventsCommand::Retry(a) => retry(a).await,
        EventsCommand::Secret(a) => secret(a),
    }
}

/// Prints the events secret of each signing secret given.
fn secret(a: EventSecretArgs) -> anyhow::Result<()> {
    let secrets = a.signing_secret.values();
    if secrets.is_empty() {
        anyhow::bail!(
            "no signing secret: give --signing-secret (or FEED_SIGNING_SECRET, or \
             --signing-secret-file) as the processor has it"
        );
    }
    for s in secrets {
        let events = feed::handler::events_secret(&s).context("--signing-secret")?;
        println!("{events}");
    }
    Ok(())
}

/// Said where pending events are listed while no processor sends them.
pub(crate) const NO_SENDER: &str = "no events receiver is configured here (--events-url): pending \
     events are kept in feed_events, and no live processor sends them";

/// Whether pending events wait for a sender that is not there (a failure
/// to tell counts as there: nothing is said).
pub(crate) async fn unsent(store: &feed::Store, pending: bool) -> bool {
    pending && !store.events_sender().await.unwrap_or(true)
}

async fn list(a: EventListArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let events = store
        .events(a.partition.as_deref(), a.status.as_deref(), a.limit)
        .await?;
    if unsent(&store, events.iter().any(|e| e.status == "pending")).await {
        eprintln!("{NO_SENDER}");
    }
    if a.json {
        return crate::status::json_lines(&events);
    }
    let mut t = crate::status::table([
        "id",
        "partition",
        "event",
        "gate",
        "delivery",
        "attempts",
        "last error",
    ]);
    for e in &events {
        t.add_row([
            e.id.to_string(),
            crate::status::clean(&e.partition_id),
            e.kind.clone(),
            e.gate.to_string(),
            e.status.clone(),
            e.attempts.to_string(),
            crate::status::clean(e.last_error.as_deref().unwrap_or("")),
        ]);
    }
    println!("{t}");
    Ok(())
}

async fn retry(a: EventRetryArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let scope = match (&a.partition, a.id) {
        (Some(p), _) => EventScope::Partition(p),
        (None, Some(id)) => EventScope::Event(id),
        (None, None) => EventScope::All,
    };
    let n = store.retry_events(scope).await?;
    println!(
        "{} back to pending; a processor with --events-url sends them",
        crate::status::count(n, "failed event")
    );
    Ok(())
}
