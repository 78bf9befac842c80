//! `processor run`: the daemon's flags, turned into a [`feed::Config`].
//! Every default is a `Config::…` constant of the library; clap shows it.

use anyhow::Context;
use clap::Args;
use feed::Config;
use feed::config::InputsUrl;
use humantime::Duration;

use super::listen::ListenArgs;
use super::run_flags::{DispatchArgs, EventsArgs, FlowArgs, HandlerArgs, LeaseArgs, RetriesArgs};
use super::{DbArgs, LogFormat, duration, init_logs_and_traces, shutdown_signal};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Longest one database statement may take; one cut off is retried on a fresh connection, so a dead connection never hangs the processor
    #[arg(long, env = "FEED_STATEMENT_TIMEOUT", help_heading = "Database", value_parser = duration, default_value_t = Config::STATEMENT_TIMEOUT.into())]
    statement_timeout: Duration,
    /// Do not apply migrations at start [default: off]
    #[arg(long, env = "FEED_NO_MIGRATE", help_heading = "Database")]
    no_migrate: bool,
    #[command(flatten)]
    handler: HandlerArgs,
    #[command(flatten)]
    dispatch: DispatchArgs,
    #[command(flatten)]
    leases: LeaseArgs,
    #[command(flatten)]
    retries: RetriesArgs,
    #[command(flatten)]
    flow: FlowArgs,
    #[command(flatten)]
    listen: ListenArgs,
    /// Serve the dashboard and its JSON API under / on --listen [default: off]
    #[arg(long, env = "FEED_UI", help_heading = "Listener and console")]
    ui: bool,
    /// The base URL handlers reach --listen at (behind a proxy, or from another container, e.g.
    /// http://feed-1:8080), for the Feed-Inputs URL that an item at a gate above 0 carries;
    /// 'off' sends none [default: the address of --listen, 0.0.0.0 as 127.0.0.1 and :: as ::1]
    #[arg(long, env = "FEED_INPUTS_URL", value_parser = inputs_url, help_heading = "Listener and console")]
    inputs_url: Option<InputsUrl>,
    /// How long an inputs URL stays valid (tests shorten it) [default: --request-timeout plus
    /// --session-expiry]
    #[arg(long, env = "FEED_INPUTS_TTL", value_parser = duration, hide = true)]
    inputs_ttl: Option<Duration>,
    /// Tenants that label series of their own in /metrics (queue wait, backlog); the rest share
    /// the label "other", so the number of series stays bounded
    #[arg(long, env = "FEED_METRICS_TENANTS", default_value_t = feed::Config::METRICS_TENANTS, help_heading = "Listener and console")]
    metrics_tenants: usize,
    #[command(flatten)]
    events: EventsArgs,
    /// Prune complete and cancelled partitions older than this every few minutes, e.g. 7d [default: off]
    #[arg(long, env = "FEED_RETENTION", value_parser = duration, help_heading = "Options")]
    retention: Option<Duration>,
    /// Log format
    #[arg(long, env = "FEED_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = "Options")]
    log_format: LogFormat,
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal().context("installing signal handlers")?;
    let traces = feed::otel::Traces::from_env()?;
    init_logs_and_traces(a.log_format, super::LOGS, traces.as_ref());
    if let Some(t) = &traces {
        tracing::info!(endpoint = %t.endpoint, "exporting traces to OpenTelemetry (OTLP)");
    }
    let mut c = Config::new(a.db.url(), "");
    c.database.pooler = a.db.db_pooler.into();
    c.database.max_lifetime = a.db.db_max_lifetime.into();
    c.database.statement_timeout = a.statement_timeout.into();
    c.database.migrate = !a.no_migrate;
    c.handler = a.handler.config();
    c.dispatch = a.dispatch.config();
    c.leases = a.leases.config();
    c.retries = a.retries.config();
    c.flow = a.flow.config();
    c.listen = a.listen.config(a.ui)?;
    c.listen.inputs_url = a.inputs_url.unwrap_or_default();
    c.listen.inputs_ttl = a.inputs_ttl.map(Into::into);
    c.listen.metrics_tenants = Some(a.metrics_tenants);
    c.events = a.events.config();
    c.retention = a.retention.map(Into::into);
    let ran = feed::run(c, shutdown).await;
    if let Some(t) = traces {
        // The exporter blocks while it sends the last spans.
        match tokio::task::spawn_blocking(move || t.shutdown()).await {
            Ok(Err(e)) => tracing::warn!(error = %e, "traces"),
            Err(e) => tracing::warn!(error = %e, "traces: the exporter did not stop"),
            Ok(Ok(())) => {}
        }
    }
    Ok(ran?)
}

/// `--inputs-url`: `off` or a base URL.
fn inputs_url(text: &str) -> Result<InputsUrl, String> {
    InputsUrl::parse(text).map_err(|e| e.to_string())
}
