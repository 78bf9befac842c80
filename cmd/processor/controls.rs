//! The operator commands: checkpoint, priority, pause, resume, cancel,
//! prune and ui, thin shells over the library's controls and console.

use anyhow::Context;
use clap::Args;

use crate::status::count;

use super::{DbArgs, LOGS, LogFormat, connect, create, duration, init_logs, shutdown_signal};

#[derive(Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The manual_checkpoint partition to advance
    #[arg(long)]
    partition: String,
    /// The new gate; must be above the current one
    #[arg(long)]
    gate: i64,
}

#[derive(Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The partition
    #[arg(long)]
    partition: String,
    /// Its new priority, -1000 to 1000 (0 is the default)
    #[arg(long, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    priority: i32,
}

#[derive(Args)]
pub struct PauseArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Only this partition
    #[arg(long, conflicts_with = "all", required_unless_present = "all")]
    partition: Option<String>,
    /// Every partition (pause --all is the stop-all switch)
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
pub struct CancelArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The partition to cancel, with its unfinished items
    #[arg(long)]
    partition: String,
}

#[derive(Args)]
pub struct PruneArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Delete complete and cancelled partitions last updated longer ago than this, e.g. 7d
    #[arg(long, value_parser = duration)]
    finished_before: humantime::Duration,
    /// Only count what would be deleted
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
pub struct UiArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    listen: crate::listen::ListenArgs,
}

pub async fn checkpoint(a: CheckpointArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    store.checkpoint(&a.partition, a.gate).await?;
    println!(
        "partition {} advanced to gate {}",
        crate::status::clean(&a.partition),
        a.gate
    );
    Ok(())
}

pub async fn priority(a: PriorityArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    store.set_priority(&a.partition, a.priority).await?;
    println!(
        "partition {} has priority {}",
        crate::status::clean(&a.partition),
        a.priority
    );
    Ok(())
}

pub async fn pause(a: PauseArgs, paused: bool) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let verb = if paused { "paused" } else { "resumed" };
    let Some(p) = &a.partition else {
        let n = if paused {
            store.pause_all().await?
        } else {
            store.resume_all().await?
        };
        println!("{} {verb}", count(n, "partition"));
        return Ok(());
    };
    if paused {
        store.pause(p).await?;
    } else {
        store.resume(p).await?;
    }
    println!("partition {} {verb}", crate::status::clean(p));
    Ok(())
}

pub async fn cancel(a: CancelArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let n = store.cancel(&a.partition).await?;
    println!(
        "partition {} cancelled ({} cancelled now)",
        crate::status::clean(&a.partition),
        count(n, "item")
    );
    Ok(())
}

pub async fn prune(a: PruneArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let p = store.prune(a.finished_before.into(), a.dry_run).await?;
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    println!(
        "{verb} {}, {} and {}",
        count(p.partitions, "partition"),
        count(p.items, "item"),
        count(p.events, "event")
    );
    Ok(())
}

/// Serves the dashboard until a signal; the handlers are installed first,
/// so a signal during start-up is not lost.
pub async fn ui(a: UiArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal().context("installing signal handlers")?;
    init_logs(LogFormat::Text, LOGS);
    let token = a.listen.token.token()?;
    let producer_token = a.listen.producer_token.token()?;
    let store = create(&a.db).await?;
    let listener = feed::server::bind(&a.listen.listen, false).await?;
    tracing::info!(
        listen = %a.listen.listen,
        actions = token.is_some(),
        enqueue = token.is_some() || producer_token.is_some(),
        "dashboard started"
    );
    let app = feed::console::Console::new(store, token)
        .with_producer_token(producer_token)
        .allowing(&a.listen.allowed_hosts)
        .trusting(&a.listen.trusted_proxies.proxies)
        .router();
    feed::server::serve_trusting(listener, app, shutdown, &a.listen.trusted_proxies.proxies)
        .await
        .context("serving the dashboard")?;
    Ok(())
}
