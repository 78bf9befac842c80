//! `processor`: the command line of Feed: parsing, logging, signals and
//! exit codes. Each command lives in a file of its own; everything else is
//! the `feed` library.

#[macro_use]
mod secret;

mod controls;
mod events;
mod items;
mod limits;
mod reference;
mod run;
mod run_flags;
mod status;
mod tokens;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// glibc's malloc cost a fifth of the processor's CPU under load (perf);
/// mimalloc is much cheaper for its many small, short-lived allocations.
/// Built without transparent huge pages (`no_thp`): asking for them on its
/// arenas made a drain's peak RSS half as large again, at no gain in speed.
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
    Run(Box<run::RunArgs>),
    /// Apply the schema migrations and exit.
    Migrate(DbArgs),
    /// Create or extend a partition from JSON lines, in one transaction.
    Enqueue(items::EnqueueArgs),
    /// Put failed items back to available with fresh attempts and reopen their partitions.
    Retry(items::RetryArgs),
    /// Show partitions, item counts, failed items and live processors.
    Status(status::StatusArgs),
    /// Run the resume example end to end on a temporary SQLite database.
    Demo(status::DemoArgs),
    /// Exit 0 when a running processor answers its /healthz (for container health checks).
    Health(status::HealthArgs),
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
    /// Block until a partition is finished: exit 0 complete, 1 failed, 2 cancelled, 3 timed out.
    Wait(events::WaitArgs),
    /// Write a partition's items as JSON lines, in the order they were written.
    Export(events::ExportArgs),
    /// Completion events: list them, send failed ones again.
    Events(events::EventsArgs),
    /// Per-tenant flow control: set, list or clear a tenant's max in flight, rate and weight.
    Limits(limits::LimitsArgs),
    /// Producer tokens for the enqueue API, each bound to a tenant: create, list or revoke them.
    Tokens(tokens::TokensArgs),
    /// Write the book's reference pages from the code (for the docs; hidden).
    #[command(hide = true)]
    Reference(reference::ReferenceArgs),
}

#[derive(Args, Clone)]
struct DbArgs {
    /// Database URL: sqlite://PATH?mode=rwc, postgres://… or mysql://…
    #[arg(
        long,
        env = "FEED_DATABASE_URL",
        default_value = feed::Config::DATABASE_URL,
        hide_env_values = true
    )]
    database_url: String,
    /// Read the database URL from this file (trailing newline ignored): a URL with a password
    /// then shows in neither the process list nor the environment [default: none]
    #[arg(
        long,
        env = "FEED_DATABASE_URL_FILE",
        value_parser = secret::read_file,
        conflicts_with = "database_url"
    )]
    database_url_file: Option<String>,
    /// What stands between Feed and PostgreSQL: none (the server or a TCP proxy such as HAProxy),
    /// session (a pooler in session mode), or transaction (PgBouncer pool_mode = transaction:
    /// each statement in its own transaction, no LISTEN)
    #[arg(long, env = "FEED_DB_POOLER", value_enum, default_value = "none")]
    db_pooler: PoolerArg,
    /// A database connection older than this is closed when it goes back to the pool: the
    /// backstop that moves connections off a node that changed role without closing them
    #[arg(long, env = "FEED_DB_MAX_LIFETIME", default_value = "30m", value_parser = duration)]
    db_max_lifetime: humantime::Duration,
}

/// `--db-pooler`.
#[derive(Clone, Copy, ValueEnum)]
enum PoolerArg {
    None,
    Session,
    Transaction,
}

impl From<PoolerArg> for feed::store::Pooler {
    fn from(p: PoolerArg) -> Self {
        match p {
            PoolerArg::None => Self::None,
            PoolerArg::Session => Self::Session,
            PoolerArg::Transaction => Self::Transaction,
        }
    }
}

impl DbArgs {
    /// The database URL, from whichever flag was given.
    fn url(&self) -> String {
        self.database_url_file
            .clone()
            .unwrap_or_else(|| self.database_url.clone())
    }

    /// The store's settings for a command's pool of `max_connections`.
    fn options(&self, max_connections: u32) -> feed::store::Options {
        let mut o = feed::store::Options::new(max_connections);
        o.pooler = self.db_pooler.into();
        o.max_lifetime = self.db_max_lifetime.into();
        o
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// A duration flag: `500ms`, `30s`, `5m`, `7d`.
fn duration(s: &str) -> Result<humantime::Duration, String> {
    s.parse()
        .map_err(|e| format!("{e}; write durations like 500ms, 30s or 5m"))
}

/// The log levels without `RUST_LOG`. In a failover sqlx's pool logs each
/// connection its role check refuses (many a second) and each slow
/// acquire; Feed says the first at a bounded rate (`store::role`), and
/// the second shows as a statement timeout or results waiting.
const LOGS: &str =
    "info,sqlx=warn,sqlx::pool::acquire=error,sqlx_core::pool::inner=off,sea_orm_migration=warn";

/// Logs to stderr in `format`, at `RUST_LOG` or else `default` levels.
fn init_logs(format: LogFormat, default: &str) {
    init_logs_and_traces(format, default, None);
}

/// Logs as [`init_logs`] does, and exports `traces` (OpenTelemetry) when
/// given. Text logs escape control characters in every field (an id
/// holding a newline cannot forge a line) and are coloured only on a
/// terminal. The spans made for traces never show in the logs.
fn init_logs_and_traces(format: LogFormat, default: &str, traces: Option<&feed::otel::Traces>) {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer;
    use tracing_subscriber::field::MakeExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
        .add_directive(
            format!("{}=off", feed::otel::TARGET)
                .parse()
                .expect("a valid directive"),
        );
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => layer
            .fmt_fields(
                tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
                    let text = format!("{value:?}");
                    let text = feed::printable::printable(&text);
                    match field.name() {
                        "message" => write!(w, "{text}"),
                        name => write!(w, "{name}={text}"),
                    }
                })
                .delimited(" "),
            )
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => layer.json().with_filter(filter).boxed(),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces.map(|t| t.layer()))
        .init();
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
    return_large_blocks();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::Migrate(db) => migrate(db).await,
        Command::Enqueue(args) => items::enqueue(args).await,
        Command::Retry(args) => items::retry(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Demo(args) => status::demo(args).await,
        Command::Health(args) => status::health(args).await,
        Command::Checkpoint(args) => controls::checkpoint(args).await,
        Command::Pause(args) => controls::pause(args, true).await,
        Command::Resume(args) => controls::pause(args, false).await,
        Command::Cancel(args) => controls::cancel(args).await,
        Command::Prune(args) => controls::prune(args).await,
        Command::Wait(args) => return events::wait(args).await,
        Command::Export(args) => events::export(args).await,
        Command::Events(args) => events::events(args).await,
        Command::Limits(args) => limits::limits(args).await,
        Command::Tokens(args) => tokens::tokens(args).await,
        Command::Reference(args) => reference::reference(args).await,
        Command::Ui(args) => match shutdown_signal() {
            Ok(stop) => {
                init_logs(LogFormat::Text, LOGS);
                controls::ui(args, stop).await
            }
            Err(e) => Err(anyhow::Error::new(e).context("installing signal handlers")),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", status::clean(&format!("{e:#}")));
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

/// The C allocator (SQLite's, the TLS library's) serves blocks of 1 MiB
/// and more straight from the OS and gives them back when freed. glibc
/// otherwise raises that threshold each time such a block is freed, and
/// then keeps freed multi-megabyte blocks (a large result written to
/// SQLite) in its heap for good.
fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning value of glibc's allocator; it is
    // called once, before any other thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
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

/// Opens the database of a command that reads or changes what is there:
/// an SQLite file that does not exist is an error, not a new empty
/// database. Says on stderr which database it opened.
async fn connect(db: &DbArgs) -> anyhow::Result<feed::Store> {
    let url = db.url();
    let store = feed::Store::open_existing(&url, &db.options(4)).await?;
    opened(store, &url).await
}

/// Opens the database of a command that may start one (`migrate`,
/// `enqueue`, `ui`, `limits`): a `mode=rwc` SQLite file is created.
async fn create(db: &DbArgs) -> anyhow::Result<feed::Store> {
    let url = db.url();
    let store = feed::Store::open(&url, &db.options(4)).await?;
    opened(store, &url).await
}

/// Migrates, and says which database this is (on stderr, so that
/// `--json` output stays JSON).
async fn opened(store: feed::Store, url: &str) -> anyhow::Result<feed::Store> {
    eprintln!("database: {}", feed::store::shown(url));
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}

async fn migrate(db: DbArgs) -> anyhow::Result<()> {
    init_logs(LogFormat::Text, LOGS);
    create(&db).await?;
    println!("migrations applied");
    Ok(())
}
