//! The producer commands: `enqueue` (JSON lines, in transactions of
//! 10,000 items) and `retry`.

use std::io::BufRead;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use feed::ids::Tenant;
use feed::store::{NewItem, OnFailure, PartitionSpec, RetryScope, Schedule};

use super::{DbArgs, connect, create};
use crate::status::count;

#[derive(Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The partition to create or extend
    #[arg(long)]
    pub partition: String,
    #[command(flatten)]
    pub partition_options: PartitionArgs,
    /// Take each line as the item's data itself, not as {"id", "gate", "data"}
    #[arg(long)]
    pub raw: bool,
    /// Put this before every item id read (to tell apart the items of several exports enqueued
    /// into one partition: item ids are unique within a partition)
    #[arg(long)]
    pub id_prefix: Option<String>,
    /// Send no item of this call before this time: epoch milliseconds or an RFC 3339 time
    /// ("2030-01-01T09:00:00Z"). A line's own not_before or delay wins
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, conflicts_with = "delay",
          value_parser = feed::schedule::not_before)]
    pub not_before: Option<Schedule>,
    /// Send no item of this call before this long after it is written, by the database's clock
    /// (a duration: "90s", "10m", "1h30m"). A line's own not_before or delay wins
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true,
          value_parser = feed::schedule::delay)]
    pub delay: Option<Schedule>,
    /// The producer's trace for every item of this call (a W3C traceparent such as
    /// "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"): each delivery's span is its
    /// child. A line's own traceparent wins [default: none]
    #[arg(long, env = "TRACEPARENT", value_name = "TRACEPARENT",
          value_parser = feed::otel::traceparent)]
    pub traceparent: Option<String>,
    /// JSON lines file; '-' or absent = standard input
    pub file: Option<String>,
}

/// The settings of a partition that a command creates (`enqueue`,
/// `schedules set`).
#[derive(Args)]
pub struct PartitionArgs {
    /// Keep the partition open when everything is done (default: close it)
    #[arg(long)]
    pub no_auto_close: bool,
    /// Never advance the gate automatically
    #[arg(long)]
    pub manual_checkpoint: bool,
    /// When an item fails for good: block (partition fails) or continue
    #[arg(long, value_enum, default_value_t = OnFailure::Block)]
    pub on_failure: OnFailure,
    /// Write a partition.gate event each time the partition's gate moves (closes, failures and
    /// cancellations always write one)
    #[arg(long)]
    pub gate_events: bool,
    /// The tenant the partition belongs to: tenants share dispatch fairly and have limits of
    /// their own (`processor limits`)
    #[arg(long)]
    pub tenant: Option<Tenant>,
    /// The partition's share of dispatch against its tenant's other partitions (or, without a
    /// tenant, against other partitions) [default: 1]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub weight: Option<u32>,
    /// The partition's own cap on items in flight [default: --max-in-flight-per-partition]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: Option<u32>,
    /// Serve the partition before the lower-priority ones it shares turns with (its tenant's, or
    /// those of no tenant), -1000 to 1000; `processor partitions priority` changes it later
    #[arg(long, default_value_t = 0, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    pub priority: i32,
}

impl PartitionArgs {
    /// The partition settings these flags give.
    pub fn spec(&self) -> PartitionSpec {
        let mut spec = PartitionSpec::default();
        spec.auto_close = !self.no_auto_close;
        spec.manual_checkpoint = self.manual_checkpoint;
        spec.on_failure = self.on_failure;
        spec.gate_events = self.gate_events;
        spec.tenant = self.tenant.clone();
        spec.weight = self.weight;
        spec.max_in_flight = self.max_in_flight;
        spec.priority = self.priority;
        spec
    }
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["partition", "all", "item"])))]
pub struct RetryArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Only this partition's failed items; with --item, the partition
    /// whose item it is
    #[arg(long)]
    pub partition: Option<String>,
    /// Only this failed item. Item ids are unique within a partition: give
    /// --partition too when several partitions have an item by this id
    #[arg(long)]
    pub item: Option<String>,
    /// Every failed item
    #[arg(long)]
    pub all: bool,
}

/// Items per transaction of `processor enqueue`: on SQLite a transaction
/// holds the one write lock, and this many commit in a fraction of a
/// second, so dispatch goes on between them.
const CHUNK: usize = feed::console::MAX_ENQUEUE_ITEMS;

pub async fn enqueue(a: EnqueueArgs) -> anyhow::Result<()> {
    let reader: Box<dyn BufRead> = match a.file.as_deref() {
        None | Some("-") => Box::new(std::io::stdin().lock()),
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {path}"))?,
        )),
    };
    let bar = progress();
    let mut items = feed::lines::read(reader, a.raw, || bar.inc(1))?;
    if let Some(prefix) = &a.id_prefix {
        for (_, item) in &mut items {
            item.id = item.id.take().map(|id| format!("{prefix}{id}"));
        }
    }
    for (_, item) in &mut items {
        if let Some(schedule) = a.not_before.or(a.delay) {
            item.schedule.get_or_insert(schedule);
        }
        if let Some(trace) = &a.traceparent {
            item.traceparent.get_or_insert_with(|| trace.clone());
        }
    }
    let store = create(&a.db).await?;
    let spec = a.partition_options.spec();
    let partition = crate::status::clean(&a.partition);
    let total = items.len();
    let (mut written, mut first) = (0, None);
    // An empty input still creates the partition.
    let chunks: Vec<&[(usize, NewItem)]> = match items.len() {
        0 => vec![&[]],
        _ => items.chunks(CHUNK).collect(),
    };
    for chunk in chunks {
        bar.set_message(format!(
            "writing: {written} of {} written",
            count(total, "item")
        ));
        let batch = chunk.iter().map(|(_, item)| item.clone()).collect();
        let started = std::time::Instant::now();
        let r = match store.enqueue(&a.partition, &spec, batch).await {
            Ok(r) => r,
            Err(e) if written == 0 => return Err(e.into()),
            Err(e) => {
                let line = chunk[0].0;
                return Err(anyhow::Error::new(e).context(format!(
                    "the first {written} items (up to line {}) were written, nothing from line \
                     {line} on: enqueue those lines again (tail -n +{line} FILE | processor enqueue …)",
                    line - 1
                )));
            }
        };
        written += r.items;
        first.get_or_insert(r);
        if !store.driver().concurrent_writes() && written < total {
            // Leave the write lock to the processors as long as this
            // transaction held it (at most 100 ms): SQLite's waiting writers
            // poll, and would not get it if the next began at once.
            tokio::time::sleep(started.elapsed().min(Duration::from_millis(100))).await;
        }
    }
    bar.finish_and_clear();
    let what = match &first {
        Some(r) if r.created => "created",
        Some(r) if r.reopened => "reopened",
        _ => "extended",
    };
    println!(
        "{} enqueued; partition {partition} {what}",
        count(written, "item")
    );
    if first.is_some_and(|r| r.failed) {
        println!(
            "partition {partition} is failed: its new items run once its failed items are retried \
             (processor retry --partition {partition})"
        );
    }
    Ok(())
}

/// A line counter on a terminal; hidden when stderr is not one.
fn progress() -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} lines read {msg} ({elapsed})")
            .expect("static template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

pub async fn retry(a: RetryArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    // Checked: an unknown item or partition, or a cancelled one, is refused.
    let r = match (&a.item, &a.partition) {
        (Some(item), partition) => {
            let r = store.retry_one(partition.as_deref(), item).await?;
            println!("item {} back to available", crate::status::clean(item));
            r
        }
        (None, Some(p)) => store.retry_partition(p).await?,
        (None, None) => store.retry_failed(RetryScope::All).await?,
    };
    if a.item.is_none() {
        println!("{} back to available", count(r.items, "failed item"));
    }
    if r.moved > 0 {
        println!(
            "{} of them moved up to their partition's current gate (the gate had moved on) and run there",
            r.moved
        );
    }
    Ok(())
}
