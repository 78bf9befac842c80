//! `schedules`: recurring partitions. `set` reads the items each tick's
//! partition gets (JSON lines, as `enqueue` reads them) and a cron
//! expression; every running processor creates the ticks' partitions.

use std::io::Read;

use anyhow::Context;
use clap::{Args, Subcommand};
use feed::recurring::{self, Recurring};

use super::items::PartitionArgs;
use super::limits::ListArgs;
use super::{DbArgs, connect, create};
use crate::status::{clean, table};

#[derive(Args)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    pub command: SchedulesCommand,
}

#[derive(Subcommand)]
pub enum SchedulesCommand {
    /// Create or replace a schedule: each tick creates the partition <NAME>-<tick time, RFC 3339
    /// UTC> with the items read (JSON lines, from FILE or standard input).
    Set(SetArgs),
    /// List the schedules with their next tick, last partition and last error.
    List(ListArgs),
    /// Remove a schedule (the partitions it created stay).
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The schedule's name (at most 234 bytes: its partitions' ids add the tick time)
    pub name: String,
    /// When it ticks: 5 cron fields ("0 2 * * *": every day at 02:00), or 6 with seconds first
    /// ("*/2 * * * * *": every two seconds)
    #[arg(long)]
    pub cron: String,
    /// The IANA time zone the expression is read in ("Europe/Paris")
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// Ticks missed while no processor ran that are created, the latest ones (1 to 1000; the
    /// others are skipped)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub backfill: u32,
    #[command(flatten)]
    pub partition_options: PartitionArgs,
    /// JSON lines file of the items; '-' or absent = standard input
    pub file: Option<String>,
}

#[derive(Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The schedule's name
    pub name: String,
}

pub async fn schedules(a: SchedulesArgs) -> anyhow::Result<()> {
    match a.command {
        SchedulesCommand::Set(a) => set(a).await,
        SchedulesCommand::List(a) => list(a).await,
        SchedulesCommand::Remove(a) => remove(a).await,
    }
}

async fn set(a: SetArgs) -> anyhow::Result<()> {
    let mut items = String::new();
    match a.file.as_deref() {
        None | Some("-") => std::io::stdin().read_to_string(&mut items),
        Some(path) => std::fs::File::open(path)
            .with_context(|| format!("opening {path}"))?
            .read_to_string(&mut items),
    }
    .context("reading the items")?;
    let mut r = Recurring::new(a.name, a.cron, items);
    r.timezone = a.timezone;
    r.backfill = a.backfill;
    r.spec = a.partition_options.spec();
    let store = create(&a.db).await?;
    let row = recurring::set(&store, &r).await?;
    println!(
        "schedule {} set; its next tick is {}",
        clean(&row.name),
        time(row.next_tick)
    );
    Ok(())
}

/// An epoch-milliseconds time as RFC 3339 UTC.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || "never".into(),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let rows = store.schedules().await?;
    if a.json {
        return crate::status::json_lines(&rows);
    }
    let mut t = table([
        "name",
        "cron",
        "time zone",
        "next tick",
        "last partition",
        "last error",
    ]);
    let or_dash = |v: Option<&str>| v.map_or_else(|| "-".into(), clean);
    for s in &rows {
        t.add_row([
            clean(&s.name),
            clean(&s.cron),
            s.timezone.clone(),
            time(s.next_tick),
            or_dash(s.last_partition.as_deref()),
            or_dash(s.last_error.as_deref()),
        ]);
    }
    println!("{t}");
    Ok(())
}

async fn remove(a: RemoveArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    if !store.remove_schedule(&a.name).await? {
        anyhow::bail!("no schedule is named {}", clean(&a.name));
    }
    println!("schedule {} removed", clean(&a.name));
    Ok(())
}
