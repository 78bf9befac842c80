//! `processor run`: the daemon's flags, turned into a [`feed::Config`].
//! Every default is a `Config::…` constant of the library; clap shows it.

use anyhow::Context;
use clap::Args;
use feed::Config;
use feed::handler::SignatureScheme;
use humantime::Duration;

use super::{DbArgs, LogFormat, controls, duration, init_logs_and_traces, shutdown_signal};

secret_list_flags!(
    SigningSecretArgs { signing_secret, signing_secret_file, env = "FEED_SIGNING_SECRET", what = "signing secret" },
    "Sign requests (Standard Webhooks and Feed-Signature): whsec_<base64> as the spec says, any other text as its own bytes; repeat it to sign with several during a rotation (FEED_SIGNING_SECRET takes one a line) [default: none]"
);

secret_list_flags!(
    EventsSecretArgs { events_signing_secret, events_signing_secret_file, env = "FEED_EVENTS_SIGNING_SECRET", what = "events signing secret" },
    "Sign event requests with this secret instead, repeatable as --signing-secret is [default: the --signing-secret]"
);

/// `--signature-scheme`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Scheme {
    /// Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) and Feed-Signature
    Both,
    /// Standard Webhooks only
    Standard,
    /// Feed-Signature only
    Feed,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Where items are POSTed, e.g. http://127.0.0.1:9000/feed (required)
    #[arg(long, env = "FEED_HANDLER_URL", hide_env_values = true)]
    handler_url: String,
    /// Items in flight at once
    #[arg(long, env = "FEED_CONCURRENCY", default_value_t = Config::CONCURRENCY)]
    concurrency: usize,
    /// Idle polling interval; with work pending the processor re-polls at once
    #[arg(long, env = "FEED_POLL_INTERVAL", value_parser = duration, default_value_t = Config::POLL_INTERVAL.into())]
    poll_interval: Duration,
    /// How often the session is heartbeated
    #[arg(long, env = "FEED_HEARTBEAT_INTERVAL", value_parser = duration, default_value_t = Config::HEARTBEAT_INTERVAL.into())]
    heartbeat_interval: Duration,
    /// A session silent this long is dead and its partitions are taken over
    #[arg(long, env = "FEED_SESSION_EXPIRY", value_parser = duration, default_value_t = Config::SESSION_EXPIRY.into())]
    session_expiry: Duration,
    /// How often leases are balanced across processors
    #[arg(long, env = "FEED_ACQUIRE_INTERVAL", value_parser = duration, default_value_t = Config::ACQUIRE_INTERVAL.into())]
    acquire_interval: Duration,
    /// Cap on partitions held by this processor [default: none]
    #[arg(long, env = "FEED_MAX_PARTITIONS")]
    max_partitions: Option<usize>,
    /// Cap on one partition's items in flight at once, so one partition cannot take every slot [default: none]
    #[arg(long, env = "FEED_MAX_IN_FLIGHT_PER_PARTITION")]
    max_in_flight_per_partition: Option<usize>,
    /// Timeout of one handler call
    #[arg(long, env = "FEED_REQUEST_TIMEOUT", value_parser = duration, default_value_t = Config::REQUEST_TIMEOUT.into())]
    request_timeout: Duration,
    /// Attempts per step before an item fails; 0 = unlimited
    #[arg(long, env = "FEED_MAX_ATTEMPTS", default_value_t = Config::MAX_ATTEMPTS)]
    max_attempts: u32,
    /// First retry delay, doubled each attempt, with jitter
    #[arg(long, env = "FEED_BACKOFF_BASE", value_parser = duration, default_value_t = Config::BACKOFF_BASE.into())]
    backoff_base: Duration,
    /// Largest retry delay
    #[arg(long, env = "FEED_BACKOFF_MAX", value_parser = duration, default_value_t = Config::BACKOFF_MAX.into())]
    backoff_max: Duration,
    /// Extra request header 'Name: value', repeatable (FEED_HEADER takes several, one per line) [default: none]
    #[arg(long = "header", env = "FEED_HEADER", value_parser = header, value_delimiter = '\n', hide_env_values = true)]
    headers: Vec<(String, String)>,
    /// Read extra request headers from this file, one 'Name: value' per line (blank lines and
    /// lines starting with # skipped): secret headers then show in neither the process list
    /// nor the environment [default: none]
    #[arg(long, env = "FEED_HEADER_FILE", value_parser = header_file)]
    header_file: Option<HeaderFile>,
    #[command(flatten)]
    signing_secret: SigningSecretArgs,
    /// Which signatures a signed request carries
    #[arg(long, env = "FEED_SIGNATURE_SCHEME", value_enum, default_value_t = Scheme::Both)]
    signature_scheme: Scheme,
    /// Also sign item requests with v1 (the body only) beside v2 in Feed-Signature, for handlers
    /// that still check v1; v1 goes away in a later release
    #[arg(long, env = "FEED_SIGNATURE_V1")]
    signature_v1: bool,
    /// Content-Type of requests
    #[arg(long, env = "FEED_CONTENT_TYPE", default_value = Config::CONTENT_TYPE)]
    content_type: String,
    /// Largest handler response body accepted, in bytes
    #[arg(long, env = "FEED_MAX_RESPONSE_BYTES", default_value_t = Config::MAX_RESPONSE_BYTES)]
    max_response_bytes: usize,
    /// Bytes of handler answers held at once across all calls; a larger answer waits for room
    #[arg(long, env = "FEED_RESPONSE_BUDGET_BYTES", default_value_t = Config::RESPONSE_BUDGET_BYTES)]
    response_budget_bytes: usize,
    /// Address of the health and metrics listener (loopback by default; say 0.0.0.0:8080 to
    /// serve every interface); 'off' disables it
    #[arg(long, env = "FEED_LISTEN", default_value = Config::LISTEN)]
    listen: String,
    /// A host name the console (--ui) answers besides IP addresses and localhost, repeatable
    /// (FEED_ALLOWED_HOST takes several, comma-separated) [default: none]
    #[arg(
        long = "allowed-host",
        env = "FEED_ALLOWED_HOST",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
    #[command(flatten)]
    trusted_proxies: controls::TrustedProxyArgs,
    /// Log format
    #[arg(long, env = "FEED_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// On SIGTERM/SIGINT, how long in-flight calls may finish before exit
    #[arg(long, env = "FEED_DRAIN_TIMEOUT", value_parser = duration, default_value_t = Config::DRAIN_TIMEOUT.into())]
    drain_timeout: Duration,
    /// Longest one database statement may take; one cut off is retried on a fresh connection, so a dead connection never hangs the processor
    #[arg(long, env = "FEED_STATEMENT_TIMEOUT", value_parser = duration, default_value_t = Config::STATEMENT_TIMEOUT.into())]
    statement_timeout: Duration,
    /// Do not apply migrations at start [default: off]
    #[arg(long, env = "FEED_NO_MIGRATE")]
    no_migrate: bool,
    /// Serve the dashboard and its JSON API under / on --listen [default: off]
    #[arg(long, env = "FEED_UI")]
    ui: bool,
    #[command(flatten)]
    token: controls::AdminTokenArgs,
    #[command(flatten)]
    producer_token: controls::ProducerTokenArgs,
    /// Prune complete and cancelled partitions older than this every few minutes, e.g. 7d [default: off]
    #[arg(long, env = "FEED_RETENTION", value_parser = duration)]
    retention: Option<Duration>,
    /// Items per handler request; above 1, a JSON array of items per POST (see the book: Batches)
    #[arg(long, env = "FEED_BATCH_SIZE", default_value_t = Config::BATCH_SIZE)]
    batch_size: usize,
    /// Longest a partial batch waits for more items while another request runs
    #[arg(long, env = "FEED_BATCH_WAIT", value_parser = duration, default_value_t = Config::BATCH_WAIT.into())]
    batch_wait: Duration,
    /// POST completion events (a partition complete, failed or cancelled) here as signed JSON
    /// webhooks [default: off; events are still written to feed_events]
    #[arg(long, env = "FEED_EVENTS_URL", hide_env_values = true)]
    events_url: Option<String>,
    /// Extra event request header 'Name: value', repeatable [default: the --header values]
    #[arg(long = "events-header", env = "FEED_EVENTS_HEADER", value_parser = header, value_delimiter = '\n', hide_env_values = true)]
    events_headers: Vec<(String, String)>,
    #[command(flatten)]
    events_signing_secret: EventsSecretArgs,
    /// Delivery attempts per event before it is kept as failed (0 = unlimited); the backoff is
    /// --backoff-base and --backoff-max
    #[arg(long, env = "FEED_EVENTS_MAX_ATTEMPTS", default_value_t = Config::EVENTS_MAX_ATTEMPTS)]
    events_max_attempts: u32,
    /// Items per second the whole fleet sends to the handler, e.g. 500/s or 30/m; shared through
    /// the database, so give every processor the same value [default: none]
    #[arg(long, env = "FEED_RATE_LIMIT")]
    rate_limit: Option<feed::limits::Rate>,
    /// Items the fleet may send at once after a quiet spell, on top of --rate-limit [default:
    /// 100 ms of the rate, at least twice --batch-size]
    #[arg(long, env = "FEED_RATE_BURST", requires = "rate_limit")]
    rate_burst: Option<u32>,
    /// Handler calls the circuit breaker looks back over (0 = no breaker); once half of them
    /// are seen and distinct items making up --breaker-ratio of them failed with 502-504, a
    /// timeout or a reset, dispatch holds off and probes one call at a time, and such failures
    /// count no attempt (a 500 is the handler answering: an attempt)
    #[arg(long, env = "FEED_BREAKER_CALLS", default_value_t = Config::BREAKER_CALLS)]
    breaker_calls: usize,
    /// Share of --breaker-calls whose distinct items failed with 502-504, a timeout or a reset
    /// that opens the breaker (each item counts once, so a few poison items never open it)
    #[arg(long, env = "FEED_BREAKER_RATIO", default_value_t = Config::BREAKER_RATIO)]
    breaker_ratio: f64,
}

/// `'Name: value'` of `--header`.
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

/// The headers of a `--header-file`.
#[derive(Clone)]
struct HeaderFile(Vec<(String, String)>);

/// Reads a `--header-file` while the flags are parsed.
fn header_file(path: &str) -> Result<HeaderFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the file: {e}"))?;
    text.lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(n, l)| header(l).map_err(|e| format!("line {}: {e}", n + 1)))
        .collect::<Result<_, _>>()
        .map(HeaderFile)
}

pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let shutdown = shutdown_signal().context("installing signal handlers")?;
    let traces = feed::otel::Traces::from_env()?;
    init_logs_and_traces(a.log_format, super::LOGS, traces.as_ref());
    if let Some(t) = &traces {
        tracing::info!(endpoint = %without_credentials(&t.endpoint), "exporting traces to OpenTelemetry (OTLP)");
    }
    let mut c = Config::new(a.db.url(), a.handler_url);
    c.db_pooler = a.db.db_pooler.into();
    c.db_max_lifetime = a.db.db_max_lifetime.into();
    c.concurrency = a.concurrency;
    c.poll_interval = a.poll_interval.into();
    c.heartbeat_interval = a.heartbeat_interval.into();
    c.session_expiry = a.session_expiry.into();
    c.acquire_interval = a.acquire_interval.into();
    c.max_partitions = a.max_partitions;
    c.max_in_flight_per_partition = a.max_in_flight_per_partition;
    c.request_timeout = a.request_timeout.into();
    c.max_attempts = a.max_attempts;
    c.backoff_base = a.backoff_base.into();
    c.backoff_max = a.backoff_max.into();
    c.headers = a
        .headers
        .into_iter()
        .chain(a.header_file.map(|f| f.0).unwrap_or_default())
        .collect();
    c.signing_secrets = a.signing_secret.values();
    c.signature_scheme = match a.signature_scheme {
        Scheme::Both => SignatureScheme::Both,
        Scheme::Standard => SignatureScheme::Standard,
        Scheme::Feed => SignatureScheme::Feed,
    };
    c.content_type = a.content_type;
    c.signature_v1 = a.signature_v1;
    c.max_response_bytes = a.max_response_bytes;
    c.response_budget_bytes = a.response_budget_bytes;
    c.listen = (a.listen != "off").then_some(a.listen);
    c.drain_timeout = a.drain_timeout.into();
    c.statement_timeout = a.statement_timeout.into();
    c.migrate = !a.no_migrate;
    c.ui = a.ui;
    c.admin_token = a.token.token()?;
    c.producer_token = a.producer_token.token()?;
    c.allowed_hosts = a.allowed_hosts;
    c.trusted_proxies = a.trusted_proxies.proxies;
    c.retention = a.retention.map(Into::into);
    c.batch_size = a.batch_size;
    c.batch_wait = a.batch_wait.into();
    c.events_url = a.events_url;
    c.events_headers = (!a.events_headers.is_empty()).then_some(a.events_headers);
    c.events_signing_secrets = a.events_signing_secret.values();
    c.events_max_attempts = a.events_max_attempts;
    c.rate_limit = a.rate_limit;
    c.rate_burst = a.rate_burst;
    c.breaker_calls = a.breaker_calls;
    c.breaker_ratio = a.breaker_ratio;
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

/// An endpoint as it may be logged: without a user or password.
fn without_credentials(endpoint: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".into(),
    }
}
