//! The read-only commands: `status` (tables or JSON), `health` and `demo`.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

use feed::store::listing::PartitionView;
use feed::store::status::{LIST_LIMIT, Status};

use super::{DbArgs, connect, fleet};

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Only this partition
    #[arg(long)]
    pub partition: Option<String>,
    /// Print JSON (stable field names) instead of tables
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DemoArgs {
    /// Keep the demo's database here instead of a temporary file (to inspect it afterwards)
    #[arg(long)]
    pub database_url: Option<String>,
    /// Number of resumes to classify at gate 0
    #[arg(long, default_value_t = 40)]
    pub resumes: usize,
}

#[derive(Args)]
pub struct HealthArgs {
    /// The processor's health URL
    #[arg(
        long,
        env = "FEED_HEALTH_URL",
        default_value = "http://127.0.0.1:8080/healthz"
    )]
    pub url: String,
}

/// Prints one JSON object per line (the `--json` form of the listings).
pub(crate) fn json_lines<T: serde::Serialize>(rows: &[T]) -> anyhow::Result<()> {
    for row in rows {
        println!("{}", serde_json::to_string(row)?);
    }
    Ok(())
}

/// An empty table in the status output's style.
pub(crate) fn table<const N: usize>(header: [&str; N]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_BORDERS_ONLY)
        .set_header(header);
    t
}

pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let s = store.status(a.partition.as_deref()).await?;
    if let Some(p) = &a.partition
        && s.partitions.is_empty()
    {
        return Err(feed::Error::NotFound(format!("partition {p}")).into());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let unsent = crate::events::unsent(&store, s.events_pending > 0).await;
    print_partitions(&s, a.partition.is_none());
    fleet::print_throughput(&s);
    fleet::print_backlog(&s);
    print_items(&s);
    print_events(&s, unsent);
    if s.failed_items.len() >= LIST_LIMIT {
        println!(
            "showing the first {LIST_LIMIT} failed items (by partition and id); more may be failed"
        );
    }
    fleet::print_processors(&s);
    Ok(())
}

/// The partitions: counts by status, the table, when the first scheduled
/// item comes due and, for a listing of `all` that was cut, how to see
/// the rest.
fn print_partitions(s: &Status, all: bool) {
    let by_status: Vec<String> = s
        .partitions_by_status
        .iter()
        .map(|(k, v)| format!("{}: {v}", clean(k)))
        .collect();
    println!(
        "partitions  {}",
        if by_status.is_empty() {
            "none".into()
        } else {
            by_status.join("  ")
        }
    );
    println!("{}", partition_table(&s.partitions));
    let waiting: i64 = s.partitions.iter().map(|p| p.scheduled_items).sum();
    let first = s
        .partitions
        .iter()
        .filter_map(|p| Some((p.next_due?, p.next_due_in_ms?)))
        .min();
    if let Some((due, due_in)) = first {
        println!(
            "scheduled   {waiting} {}; the first comes due {}",
            if waiting == 1 {
                "item waits for its time"
            } else {
                "items wait for their time"
            },
            due_at(due, due_in)
        );
    }
    let total: i64 = s.partitions_by_status.values().sum();
    if s.partitions.len() < total as usize && all {
        println!(
            "showing the first {} of {total} partitions (failed first, then available, then the rest, each by id); \
             see one with --partition ID, or page through all in the console (processor ui)",
            s.partitions.len()
        );
    }
}

/// A row per partition: status (paused, priority), gate, owner, items by
/// gate, scheduled.
fn partition_table(partitions: &[PartitionView]) -> comfy_table::Table {
    let mut t = table([
        "partition",
        "status",
        "gate",
        "owner",
        "items by gate (available/complete/failed)",
        "scheduled",
    ]);
    for p in partitions {
        let gates: Vec<String> = p
            .items_by_gate
            .iter()
            .map(|(g, m)| {
                let n = |k: &str| m.get(k).copied().unwrap_or(0);
                format!("{g}: {}/{}/{}", n("available"), n("complete"), n("failed"))
            })
            .collect();
        let owner = p
            .owner
            .as_deref()
            .map(|o| o.chars().take(8).collect())
            .unwrap_or_else(|| "-".to_string());
        t.add_row([
            clean(&p.id),
            format!(
                "{}{}{}",
                clean(&p.status),
                if p.paused { " (paused)" } else { "" },
                match p.priority {
                    0 => String::new(),
                    n => format!(" (priority {n})"),
                }
            ),
            p.gate.to_string(),
            clean(&owner),
            gates.join("  "),
            scheduled(p.scheduled_items, p.next_due, p.next_due_in_ms),
        ]);
    }
    t
}

/// The failed items, and the first of those waiting to retry.
fn print_items(s: &Status) {
    if !s.failed_items.is_empty() {
        println!("{}", item_table("failed item", &s.failed_items));
    }
    if !s.retrying_items.is_empty() {
        let shown = &s.retrying_items[..s.retrying_items.len().min(RETRYING_SHOWN)];
        println!("{}", item_table("waiting to retry", shown));
        if s.retrying_items.len() > RETRYING_SHOWN {
            println!(
                "showing {RETRYING_SHOWN} of {}{} items waiting to retry (--json lists up to {LIST_LIMIT})",
                s.retrying_items.len(),
                if s.retrying_items.len() >= LIST_LIMIT {
                    "+"
                } else {
                    ""
                }
            );
        }
    }
}

/// Completion events not delivered yet, when there are any, and whether
/// any processor sends them (`unsent`: none does).
fn print_events(s: &Status, unsent: bool) {
    if s.events_pending > 0 || s.events_failed > 0 {
        println!(
            "events      pending: {}  failed: {}{}",
            s.events_pending,
            s.events_failed,
            if s.events_failed > 0 {
                " (see `processor events list --status failed`; `processor events retry` sends them again)"
            } else {
                ""
            }
        );
    }
    if unsent {
        println!("            {}", crate::events::NO_SENDER);
    }
}

/// A partition's scheduled items: how many, and when the first comes due.
fn scheduled(items: i64, due: Option<i64>, due_in: Option<i64>) -> String {
    match (due, due_in) {
        (Some(due), Some(due_in)) if items > 0 => format!("{items}, next {}", due_at(due, due_in)),
        _ => "-".into(),
    }
}

/// A due time as an RFC 3339 time and how far ahead it is (by the
/// database's clock, as the status was read).
pub(crate) fn due_at(due: i64, due_in: i64) -> String {
    let at = chrono::DateTime::from_timestamp_millis(due)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| due.to_string());
    let secs = Duration::from_secs(u64::try_from(due_in.max(0) / 1000).unwrap_or(0));
    format!("at {at} (in {})", humantime::format_duration(secs))
}

/// A table of items with their attempts and last error, headed `what`.
fn item_table(what: &str, items: &[feed::store::listing::ItemView]) -> comfy_table::Table {
    let mut t = table([what, "partition", "gate", "attempts", "last error"]);
    for f in items {
        t.add_row([
            clean(&f.id),
            clean(&f.partition_id),
            f.gate.to_string(),
            f.attempts.to_string(),
            clean(f.last_error.as_deref().unwrap_or_default()),
        ]);
    }
    t
}

/// Items waiting to retry that the tables show.
const RETRYING_SHOWN: usize = 20;

pub async fn health(a: HealthArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?;
    let resp = client
        .get(&a.url)
        .send()
        .await
        .with_context(|| format!("GET {}", a.url))?;
    anyhow::ensure!(
        resp.status().is_success(),
        "{} answered {}",
        a.url,
        resp.status()
    );
    println!("ok");
    Ok(())
}

pub async fn demo(a: DemoArgs) -> anyhow::Result<()> {
    crate::init_logs(crate::LogFormat::Text, "warn");
    println!(
        "Feed demo: the resume example (gate 0: classify each resume; gate 1: rank and pick the top 10)"
    );
    let s = feed::demo::run(a.resumes, a.database_url.as_deref(), |line| {
        println!("{line}")
    })
    .await?;
    println!();
    println!("top candidates:");
    for (i, c) in s.top.iter().enumerate() {
        println!(
            "  {:>2}. {:<16} score {}",
            i + 1,
            c["candidate"].as_str().unwrap_or("?"),
            c["score"]
        );
    }
    println!(
        "summary: {} classified, {} ranked, partition {} in {:.1}s",
        count(s.classified, "resume"),
        s.top.len(),
        s.status,
        s.elapsed.as_secs_f64()
    );
    anyhow::ensure!(
        s.status == "complete",
        "the demo partition ended {}",
        s.status
    );
    Ok(())
}

/// `n` and a noun, plural unless `n` is 1: "1 item", "2 items", "0 items".
pub(crate) fn count(n: impl ToString, noun: &str) -> String {
    let n = n.to_string();
    let s = if n == "1" { "" } else { "s" };
    format!("{n} {noun}{s}")
}

/// Text from the database as it may be printed: control characters
/// escaped, so an id or an error message cannot drive the terminal.
pub(crate) fn clean(text: &str) -> String {
    feed::printable::printable(text).into_owned()
}
