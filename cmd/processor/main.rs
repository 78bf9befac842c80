//! `processor`: the command line of Feed: parsing, logging and exit
//! codes. Each command lives in a file of its own, the database flags in
//! `db`, the process's set-up (allocator, signals) in `process`;
//! everything else is the `feed` library.

#![deny(clippy::unwrap_used)]

#[macro_use]
mod secret;

mod controls;
mod db;
mod events;
mod fleet;
mod items;
mod limits;
mod listen;
mod process;
mod reference;
mod run;
mod run_flags;
mod schedules;
mod status;
mod tokens;
mod wait_hints;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use db::{DbArgs, connect, create};
use process::shutdown_signal;

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
    /// Set a partition's priority: it is served before the lower-priority partitions it shares
    /// turns with (its tenant's, or those of no tenant)
    Priority(controls::PriorityArgs),
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
    /// Recurring partitions: set, list or remove a schedule that creates a partition at each cron
    /// tick.
    Schedules(schedules::SchedulesArgs),
    /// Write the book's reference pages from the code (for the docs; hidden).
    #[command(hide = true)]
    Reference(reference::ReferenceArgs),
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
/// The OpenTelemetry SDK says a failed export or dropped spans as a
/// warning or error; its other lines are for debugging it.
const LOGS: &str = "info,sqlx=warn,sqlx::pool::acquire=error,sqlx_core::pool::inner=off,\
     sea_orm_migration=warn,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry-otlp=warn";

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
            .with_filter(feed::logs::Asked(filter))
            .boxed(),
        LogFormat::Json => layer.json().with_filter(feed::logs::Asked(filter)).boxed(),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces.map(|t| t.layer()))
        .init();
}

/// The command line, parsed; `--help` shows an environment variable's
/// value only when it is set (clap writes `[env: NAME=]` for one that is
/// not, which reads as set to empty).
fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = unset_env_values_hidden(Cli::command()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `cmd` and its subcommands with the values of unset variables hidden.
fn unset_env_values_hidden(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let unset = a
            .get_env()
            .is_some_and(|name| std::env::var_os(name).is_none());
        if unset { a.hide_env_values(true) } else { a }
    })
    .mut_subcommands(unset_env_values_hidden)
}

#[tokio::main]
async fn main() -> ExitCode {
    process::exit_quietly_on_closed_pipe();
    process::return_large_blocks();
    let cli = parse();
    let result = match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::Migrate(db) => db::migrate(db).await,
        Command::Enqueue(args) => items::enqueue(args).await,
        Command::Retry(args) => items::retry(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Demo(args) => status::demo(args).await,
        Command::Health(args) => status::health(args).await,
        Command::Checkpoint(args) => controls::checkpoint(args).await,
        Command::Priority(args) => controls::priority(args).await,
        Command::Pause(args) => controls::pause(args, true).await,
        Command::Resume(args) => controls::pause(args, false).await,
        Command::Cancel(args) => controls::cancel(args).await,
        Command::Prune(args) => controls::prune(args).await,
        Command::Wait(args) => return events::wait(args).await,
        Command::Export(args) => events::export(args).await,
        Command::Events(args) => events::events(args).await,
        Command::Limits(args) => limits::limits(args).await,
        Command::Tokens(args) => tokens::tokens(args).await,
        Command::Schedules(args) => schedules::schedules(args).await,
        Command::Reference(args) => reference::reference(args).await,
        Command::Ui(args) => controls::ui(args).await,
    };
    exit_code(result)
}

/// 0, or the error said on stderr and 2 for a usage error (a flag, the
/// database URL, an input), 1 for any other.
fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    let Err(e) = result else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {}", status::clean(&format!("{e:#}")));
    let usage = matches!(
        e.downcast_ref::<feed::Error>(),
        Some(feed::Error::Config(_) | feed::Error::DatabaseUrl(_) | feed::Error::Invalid(_))
    );
    ExitCode::from(if usage { 2 } else { 1 })
}
