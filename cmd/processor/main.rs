//! `processor`: the command line of Feed. Only flags and wiring live here;
//! everything else is the `feed` library.

mod controls;

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use feed::store::{NewItem, OnFailure, PartitionSpec, RetryScope};

/// glibc's malloc cost a fifth of the processor's CPU under load (perf);
/// mimalloc is much cheaper for its many small, short-lived allocations.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "processor",
    version,
    about = "Feed: a partition processor on a relational database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the processor daemon: lease partitions and deliver their items to the handler.
    #[command(args_override_self = true)]
    Run(Box<RunArgs>),
    /// Apply the schema migrations and exit.
    Migrate(DbArgs),
    /// Create or extend a partition from JSON lines, in one transaction.
    Enqueue(EnqueueArgs),
    /// Put failed items back to available with fresh attempts and reopen their partitions.
    Retry(RetryArgs),
    /// Show partitions, item counts, failed items and live processors.
    Status(StatusArgs),
    /// Run the resume example end to end on a temporary SQLite database.
    Demo(DemoArgs),
    /// Exit 0 when a running processor answers its /healthz (for container health checks).
    Health(HealthArgs),
    /// Advance a manual_checkpoint partition to a higher gate.
    Checkpoint(controls::CheckpointArgs),
    /// Stop dispatching a partition's items (or every partition's) until resumed.
    Pause(controls::PauseArgs),
    /// Dispatch a paused partition (or every paused one) again.
    Resume(controls::PauseArgs),
    /// Cancel a partition: it and its unfinished items become cancelled.
    Cancel(controls::CancelArgs),
    /// Delete complete and cancelled partitions (and their items) finished before a cutoff.
    Prune(controls::PruneArgs),
    /// Serve the web dashboard and its JSON API on its own (no handler needed).
    Ui(controls::UiArgs),
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Only this partition
    #[arg(long)]
    partition: Option<String>,
    /// Print JSON (stable field names) instead of tables
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// Keep the demo's database here instead of a temporary file (to inspect it afterwards)
    #[arg(long)]
    database_url: Option<String>,
    /// Number of resumes to classify at gate 0 [default: 40]
    #[arg(long, default_value_t = 40, hide_default_value = true)]
    resumes: usize,
}

#[derive(Args)]
struct HealthArgs {
    /// The processor's health URL [default: http://127.0.0.1:8080/healthz]
    #[arg(
        long,
        env = "FEED_HEALTH_URL",
        default_value = "http://127.0.0.1:8080/healthz",
        hide_default_value = true
    )]
    url: String,
}

#[derive(Args, Clone)]
struct DbArgs {
    /// Database URL: sqlite://PATH?mode=rwc, postgres://… or mysql://… [default: sqlite://feed.db?mode=rwc]
    #[arg(
        long,
        env = "FEED_DATABASE_URL",
        default_value = "sqlite://feed.db?mode=rwc",
        hide_default_value = true,
        hide_env_values = true
    )]
    database_url: String,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Where items are POSTed, e.g. http://127.0.0.1:9000/feed (required)
    #[arg(long, env = "FEED_HANDLER_URL")]
    handler_url: String,
    /// Items in flight at once [default: 64]
    #[arg(
        long,
        env = "FEED_CONCURRENCY",
        default_value_t = 64,
        hide_default_value = true
    )]
    concurrency: usize,
    /// Idle polling interval; with work pending the processor re-polls at once [default: 1s]
    #[arg(long, env = "FEED_POLL_INTERVAL", default_value = "1s", value_parser = duration, hide_default_value = true)]
    poll_interval: Duration,
    /// How often the session is heartbeated [default: 1s]
    #[arg(long, env = "FEED_HEARTBEAT_INTERVAL", default_value = "1s", value_parser = duration, hide_default_value = true)]
    heartbeat_interval: Duration,
    /// A session silent this long is dead and its partitions are taken over [default: 10s]
    #[arg(long, env = "FEED_SESSION_EXPIRY", default_value = "10s", value_parser = duration, hide_default_value = true)]
    session_expiry: Duration,
    /// How often leases are balanced across processors [default: 2s]
    #[arg(long, env = "FEED_ACQUIRE_INTERVAL", default_value = "2s", value_parser = duration, hide_default_value = true)]
    acquire_interval: Duration,
    /// Cap on partitions held by this processor [default: none]
    #[arg(long, env = "FEED_MAX_PARTITIONS")]
    max_partitions: Option<usize>,
    /// Cap on one partition's items in flight at once, so one partition cannot take every slot [default: none]
    #[arg(long, env = "FEED_MAX_IN_FLIGHT_PER_PARTITION")]
    max_in_flight_per_partition: Option<usize>,
    /// Timeout of one handler call [default: 30s]
    #[arg(long, env = "FEED_REQUEST_TIMEOUT", default_value = "30s", value_parser = duration, hide_default_value = true)]
    request_timeout: Duration,
    /// Attempts per step before an item fails; 0 = unlimited [default: 5]
    #[arg(
        long,
        env = "FEED_MAX_ATTEMPTS",
        default_value_t = 5,
        hide_default_value = true
    )]
    max_attempts: u32,
    /// First retry delay, doubled each attempt, with jitter [default: 1s]
    #[arg(long, env = "FEED_BACKOFF_BASE", default_value = "1s", value_parser = duration, hide_default_value = true)]
    backoff_base: Duration,
    /// Largest retry delay [default: 5m]
    #[arg(long, env = "FEED_BACKOFF_MAX", default_value = "5m", value_parser = duration, hide_default_value = true)]
    backoff_max: Duration,
    /// Extra request header 'Name: value', repeatable (FEED_HEADER takes several, one per line) [default: none]
    #[arg(long = "header", env = "FEED_HEADER", value_parser = header, value_delimiter = '\n', hide_env_values = true)]
    headers: Vec<(String, String)>,
    /// Sign requests: Feed-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body"> [default: none]
    #[arg(
        long,
        env = "FEED_SIGNING_SECRET",
        hide_env_values = true,
        conflicts_with = "signing_secret_file"
    )]
    signing_secret: Option<String>,
    /// Read the signing secret from this file (trailing newline ignored) [default: none]
    #[arg(long, env = "FEED_SIGNING_SECRET_FILE")]
    signing_secret_file: Option<std::path::PathBuf>,
    /// Content-Type of requests [default: application/json]
    #[arg(
        long,
        env = "FEED_CONTENT_TYPE",
        default_value = "application/json",
        hide_default_value = true
    )]
    content_type: String,
    /// Largest handler response body accepted, in bytes [default: 16777216 (16 MiB)]
    #[arg(long, env = "FEED_MAX_RESPONSE_BYTES", default_value_t = 16 << 20, hide_default_value = true)]
    max_response_bytes: usize,
    /// Address of the health and metrics listener; 'off' disables it [default: 0.0.0.0:8080]
    #[arg(
        long,
        env = "FEED_LISTEN",
        default_value = "0.0.0.0:8080",
        hide_default_value = true
    )]
    listen: String,
    /// Log format [default: text]
    #[arg(long, env = "FEED_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, hide_default_value = true)]
    log_format: LogFormat,
    /// On SIGTERM/SIGINT, how long in-flight calls may finish before exit [default: 30s]
    #[arg(long, env = "FEED_DRAIN_TIMEOUT", default_value = "30s", value_parser = duration, hide_default_value = true)]
    drain_timeout: Duration,
    /// Longest one database statement may take; one cut off is retried on a fresh connection, so a dead connection never hangs the processor [default: 30s]
    #[arg(long, env = "FEED_STATEMENT_TIMEOUT", default_value = "30s", value_parser = duration, hide_default_value = true)]
    statement_timeout: Duration,
    /// Do not apply migrations at start [default: off]
    #[arg(long, env = "FEED_NO_MIGRATE")]
    no_migrate: bool,
    /// Serve the dashboard and its JSON API under / on --listen [default: off]
    #[arg(long, env = "FEED_UI")]
    ui: bool,
    #[command(flatten)]
    token: controls::TokenArgs,
    /// Prune complete and cancelled partitions older than this every few minutes, e.g. 7d [default: off]
    #[arg(long, env = "FEED_RETENTION", value_parser = duration)]
    retention: Option<Duration>,
    /// Items per handler request; above 1, a JSON array of items per POST (README: Batches) [default: 1]
    #[arg(
        long,
        env = "FEED_BATCH_SIZE",
        default_value_t = 1,
        hide_default_value = true
    )]
    batch_size: usize,
    /// Longest a partial batch waits for more items while another request runs [default: 5ms]
    #[arg(long, env = "FEED_BATCH_WAIT", default_value = "5ms", value_parser = duration, hide_default_value = true)]
    batch_wait: Duration,
}

#[derive(Args)]
struct EnqueueArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The partition to create or extend
    #[arg(long)]
    partition: String,
    /// Keep the partition open when everything is done (default: close it)
    #[arg(long)]
    no_auto_close: bool,
    /// Never advance the gate automatically
    #[arg(long)]
    manual_checkpoint: bool,
    /// When an item fails for good: block (partition fails) or continue [default: block]
    #[arg(long, value_enum, default_value_t = OnFailure::Block, hide_default_value = true)]
    on_failure: OnFailure,
    /// Take each line as the item's data itself, not as {"id", "gate", "data"}
    #[arg(long)]
    raw: bool,
    /// JSON lines file; '-' or absent = standard input
    file: Option<String>,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["partition", "all", "item"])))]
struct RetryArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Only this partition's failed items
    #[arg(long)]
    partition: Option<String>,
    /// Only this failed item
    #[arg(long)]
    item: Option<String>,
    /// Every failed item
    #[arg(long)]
    all: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e}; write durations like 500ms, 30s or 5m"))
}

fn header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| "expected 'Name: value'".to_string())?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the header name is empty; expected 'Name: value'".into());
    }
    Ok((name.to_string(), value.trim().to_string()))
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,sqlx=warn,sea_orm_migration=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Installs the SIGTERM/SIGINT handlers now (so a signal that arrives
/// during start-up is not lost) and returns a future that resolves at the
/// first one; a second one exits at once.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tokio::spawn(async move {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            eprintln!("second signal: exiting now");
            std::process::exit(130);
        });
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    exit_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(*args).await,
        Command::Migrate(db) => migrate(db).await,
        Command::Enqueue(args) => enqueue(args).await,
        Command::Retry(args) => retry(args).await,
        Command::Status(args) => status(args).await,
        Command::Demo(args) => demo(args).await,
        Command::Health(args) => health(args).await,
        Command::Checkpoint(args) => controls::checkpoint(args).await,
        Command::Pause(args) => controls::pause(args, true).await,
        Command::Resume(args) => controls::pause(args, false).await,
        Command::Cancel(args) => controls::cancel(args).await,
        Command::Prune(args) => controls::prune(args).await,
        Command::Ui(args) => match shutdown_signal() {
            Ok(stop) => {
                init_logs(LogFormat::Text);
                controls::ui(args, stop).await
            }
            Err(e) => Err(anyhow::Error::new(e).context("installing signal handlers")),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            let usage = matches!(
                e.downcast_ref::<feed::Error>(),
                Some(
                    feed::Error::Config(_) | feed::Error::DatabaseUrl(_) | feed::Error::Invalid(_)
                )
            );
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// `println!` panics when stdout is a closed pipe (`processor status | head -1`);
/// that is the reader's choice, not an error, so the process exits 0 quietly.
fn exit_quietly_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal().context("installing signal handlers")?;
    init_logs(a.log_format);
    let mut c = feed::Config::new(a.db.database_url, a.handler_url);
    c.concurrency = a.concurrency;
    c.poll_interval = a.poll_interval;
    c.heartbeat_interval = a.heartbeat_interval;
    c.session_expiry = a.session_expiry;
    c.acquire_interval = a.acquire_interval;
    c.max_partitions = a.max_partitions;
    c.max_in_flight_per_partition = a.max_in_flight_per_partition;
    c.request_timeout = a.request_timeout;
    c.max_attempts = a.max_attempts;
    c.backoff_base = a.backoff_base;
    c.backoff_max = a.backoff_max;
    c.headers = a.headers;
    c.signing_secret = secret(
        "--signing-secret-file",
        a.signing_secret,
        a.signing_secret_file.as_deref(),
    )?;
    c.content_type = a.content_type;
    c.max_response_bytes = a.max_response_bytes;
    c.listen = (a.listen != "off").then_some(a.listen);
    c.drain_timeout = a.drain_timeout;
    c.statement_timeout = a.statement_timeout;
    c.migrate = !a.no_migrate;
    c.ui = a.ui;
    c.admin_token = a.token.token()?;
    c.retention = a.retention;
    c.batch_size = a.batch_size;
    c.batch_wait = a.batch_wait;
    Ok(feed::run(c, shutdown).await?)
}

/// A secret given on the command line, or read from `file` (trailing newline ignored).
fn secret(
    flag: &str,
    value: Option<String>,
    file: Option<&std::path::Path>,
) -> Result<Option<String>, feed::Error> {
    let Some(path) = file else { return Ok(value) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| feed::Error::Config(format!("{flag} {}: {e}", path.display())))?;
    Ok(Some(text.trim_end_matches(['\r', '\n']).to_string()))
}

async fn connect(db: &DbArgs) -> anyhow::Result<feed::Store> {
    let store = feed::Store::connect(&db.database_url, 4).await?;
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}

async fn migrate(db: DbArgs) -> anyhow::Result<()> {
    init_logs(LogFormat::Text);
    connect(&db).await?;
    println!("migrations applied");
    Ok(())
}

async fn enqueue(a: EnqueueArgs) -> anyhow::Result<()> {
    let reader: Box<dyn BufRead> = match a.file.as_deref() {
        None | Some("-") => Box::new(std::io::stdin().lock()),
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {path}"))?,
        )),
    };
    let bar = progress();
    let mut items = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", n + 1))?;
        bar.inc(1);
        if line.trim().is_empty() {
            continue;
        }
        items.push(parse_line(&line, a.raw).map_err(|e| {
            feed::Error::Invalid(format!("line {}: {e}; nothing was written", n + 1))
        })?);
    }
    bar.set_message(format!("writing {} items in one transaction", items.len()));
    let store = connect(&a.db).await?;
    let spec = PartitionSpec {
        auto_close: !a.no_auto_close,
        manual_checkpoint: a.manual_checkpoint,
        on_failure: a.on_failure,
    };
    let r = store.enqueue(&a.partition, &spec, items).await?;
    bar.finish_and_clear();
    let what = if r.created {
        "created"
    } else if r.reopened {
        "reopened"
    } else {
        "extended"
    };
    println!(
        "{} items enqueued; partition {} {what}",
        r.items, a.partition
    );
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

/// One JSON line: `{"id"?, "gate"?, "data"}`, or with `raw` the data itself.
fn parse_line(line: &str, raw: bool) -> Result<NewItem, String> {
    if raw {
        return Ok(NewItem {
            id: None,
            gate: None,
            data: line.as_bytes().to_vec(),
        });
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        id: Option<String>,
        gate: Option<i64>,
        data: serde_json::Value,
    }
    let l: Line = serde_json::from_str(line).map_err(|e| {
        let what = e.to_string().replace(" at line 1 column", " at column");
        format!(
            "{what}; expected {{\"id\"?: string, \"gate\"?: int, \"data\": any}} (or use --raw)"
        )
    })?;
    if l.gate.is_some_and(|g| g < 0) {
        return Err("gate must not be negative".into());
    }
    Ok(NewItem {
        id: l.id,
        gate: l.gate,
        data: serde_json::to_vec(&l.data).map_err(|e| e.to_string())?,
    })
}

async fn retry(a: RetryArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    // Checked: an unknown item or partition, or a cancelled one, is refused.
    let r = match (&a.item, &a.partition) {
        (Some(item), _) => {
            let r = store.retry_one(item).await?;
            println!("item {item} back to available");
            r
        }
        (None, Some(p)) => store.retry_partition(p).await?,
        (None, None) => store.retry_failed(RetryScope::All).await?,
    };
    if a.item.is_none() {
        println!("{} failed items back to available", r.items);
    }
    if r.moved > 0 {
        println!(
            "{} of them moved up to their partition's current gate (the gate had moved on) and run there",
            r.moved
        );
    }
    Ok(())
}

async fn health(a: HealthArgs) -> anyhow::Result<()> {
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

async fn status(a: StatusArgs) -> anyhow::Result<()> {
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
    let by_status: Vec<String> = s
        .partitions_by_status
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!(
        "partitions  {}",
        if by_status.is_empty() {
            "none".into()
        } else {
            by_status.join("  ")
        }
    );
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_BORDERS_ONLY)
        .set_header([
            "partition",
            "status",
            "gate",
            "owner",
            "items by gate (available/complete/failed)",
        ]);
    for p in &s.partitions {
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
            p.id.clone(),
            if p.paused {
                format!("{} (paused)", p.status)
            } else {
                p.status.clone()
            },
            p.gate.to_string(),
            owner,
            gates.join("  "),
        ]);
    }
    println!("{t}");
    if !s.failed_items.is_empty() {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::UTF8_BORDERS_ONLY)
            .set_header(["failed item", "partition", "gate", "attempts", "last error"]);
        for f in &s.failed_items {
            t.add_row([
                f.id.clone(),
                f.partition_id.clone(),
                f.gate.to_string(),
                f.attempts.to_string(),
                f.last_error.clone().unwrap_or_default(),
            ]);
        }
        println!("{t}");
    }
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_BORDERS_ONLY)
        .set_header([
            "processor",
            "host",
            "pid",
            "version",
            "partitions",
            "last heartbeat",
        ]);
    for p in &s.processors {
        t.add_row([
            p.id.clone(),
            p.hostname.clone(),
            p.pid.to_string(),
            p.software_version.clone(),
            p.partitions.to_string(),
            format!("{:.1}s ago", p.heartbeat_age_ms as f64 / 1000.0),
        ]);
    }
    if s.processors.is_empty() {
        println!("no live processors");
    } else {
        println!("{t}");
    }
    Ok(())
}

async fn demo(a: DemoArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    println!(
        "Feed demo: the resume example (gate 0: classify each resume; gate 1: rank and pick the top 10)"
    );
    let s = feed::demo::run(a.resumes, a.database_url.as_deref()).await?;
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
        "summary: {} resumes classified, {} ranked, partition {} in {:.1}s",
        s.classified,
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
