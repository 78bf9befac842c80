//! The flags of `processor run`, in the groups of [`feed::Config`]: each
//! group turns into its part of the configuration, and `--help` lists
//! them under their headings.

use clap::Args;
use feed::Config;
use feed::config::signing::SignatureScheme;
use feed::config::{DispatchConfig, EventsConfig, FlowConfig, HandlerConfig, LeaseConfig, Policy};
use humantime::Duration;

use super::duration;

secret_list_flags!(
    SigningSecretArgs { signing_secret, signing_secret_file, env = "FEED_SIGNING_SECRET", what = "signing secret" },
    "Sign requests (Standard Webhooks and Feed-Signature): whsec_<base64> as the spec says, any other text as its own bytes; repeat it to sign with several during a rotation (FEED_SIGNING_SECRET takes one a line) [default: none]"
);

secret_list_flags!(
    EventsSecretArgs { events_signing_secret, events_signing_secret_file, env = "FEED_EVENTS_SIGNING_SECRET", what = "events signing secret" },
    "Sign event requests with this secret, repeatable as --signing-secret is [default: the events secret of each --signing-secret, which `processor events secret` prints]"
);

/// `--signature-scheme`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Scheme {
    /// Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) and Feed-Signature
    Both,
    /// Standard Webhooks only
    Standard,
    /// Feed-Signature only
    Feed,
}

/// How the handler is called.
#[derive(Args)]
#[command(next_help_heading = "Handler")]
pub struct HandlerArgs {
    /// Where items are POSTed, e.g. http://127.0.0.1:9000/feed (required)
    #[arg(long, env = "FEED_HANDLER_URL", hide_env_values = true)]
    pub handler_url: String,
    /// Handler requests in flight at once (each carries up to --batch-size items)
    #[arg(long, env = "FEED_CONCURRENCY", default_value_t = Config::CONCURRENCY)]
    pub concurrency: usize,
    /// Timeout of one handler call
    #[arg(long, env = "FEED_REQUEST_TIMEOUT", value_parser = duration, default_value_t = Config::REQUEST_TIMEOUT.into())]
    pub request_timeout: Duration,
    /// Items per handler request; above 1, a JSON array of items per POST (see the book: Batches)
    #[arg(long, env = "FEED_BATCH_SIZE", default_value_t = Config::BATCH_SIZE)]
    pub batch_size: usize,
    /// Longest a partial batch waits for more items while another request runs
    #[arg(long, env = "FEED_BATCH_WAIT", value_parser = duration, default_value_t = Config::BATCH_WAIT.into())]
    pub batch_wait: Duration,
    /// Extra request header 'Name: value', repeatable (FEED_HEADER takes several, one per line) [default: none]
    #[arg(long = "header", env = "FEED_HEADER", value_parser = header, value_delimiter = '\n', hide_env_values = true)]
    pub headers: Vec<(String, String)>,
    /// Read extra request headers from this file, one 'Name: value' per line (blank lines and
    /// lines starting with # skipped): secret headers then show in neither the process list
    /// nor the environment [default: none]
    #[arg(long, env = "FEED_HEADER_FILE", value_parser = header_file)]
    pub header_file: Option<HeaderFile>,
    #[command(flatten)]
    pub signing_secret: SigningSecretArgs,
    /// Which signatures a signed request carries
    #[arg(long, env = "FEED_SIGNATURE_SCHEME", value_enum, default_value_t = Scheme::Both)]
    pub signature_scheme: Scheme,
    /// Also sign item requests with v1 (the body only) beside v2 in Feed-Signature, for handlers
    /// that still check v1; v1 goes away in a later release
    #[arg(long, env = "FEED_SIGNATURE_V1")]
    pub signature_v1: bool,
    /// Content-Type of requests
    #[arg(long, env = "FEED_CONTENT_TYPE", default_value = Config::CONTENT_TYPE)]
    pub content_type: String,
    /// Largest handler response body accepted, in bytes
    #[arg(long, env = "FEED_MAX_RESPONSE_BYTES", default_value_t = Config::MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,
    /// Bytes of handler answers held at once across all calls; a larger answer waits for room
    #[arg(long, env = "FEED_RESPONSE_BUDGET_BYTES", default_value_t = Config::RESPONSE_BUDGET_BYTES)]
    pub response_budget_bytes: usize,
}

impl HandlerArgs {
    pub fn config(self) -> HandlerConfig {
        let mut h = HandlerConfig::new(self.handler_url);
        h.concurrency = self.concurrency;
        h.request_timeout = self.request_timeout.into();
        h.batch_size = self.batch_size;
        h.batch_wait = self.batch_wait.into();
        h.headers = self
            .headers
            .into_iter()
            .chain(self.header_file.map(|f| f.0).unwrap_or_default())
            .collect();
        h.signing_secrets = self.signing_secret.values();
        h.signature_scheme = match self.signature_scheme {
            Scheme::Both => SignatureScheme::Both,
            Scheme::Standard => SignatureScheme::Standard,
            Scheme::Feed => SignatureScheme::Feed,
        };
        h.signature_v1 = self.signature_v1;
        h.content_type = self.content_type;
        h.max_response_bytes = self.max_response_bytes;
        h.response_budget_bytes = self.response_budget_bytes;
        h
    }
}

/// The dispatch loop's pace and caps.
#[derive(Args)]
#[command(next_help_heading = "Dispatch")]
pub struct DispatchArgs {
    /// Idle polling interval; with work pending the processor re-polls at once
    #[arg(long, env = "FEED_POLL_INTERVAL", value_parser = duration, default_value_t = Config::POLL_INTERVAL.into())]
    pub poll_interval: Duration,
    /// Cap on one partition's items in flight at once, so one partition cannot take every slot [default: none]
    #[arg(long, env = "FEED_MAX_IN_FLIGHT_PER_PARTITION")]
    pub max_in_flight_per_partition: Option<usize>,
    /// On SIGTERM/SIGINT, how long in-flight calls may finish before exit
    #[arg(long, env = "FEED_DRAIN_TIMEOUT", value_parser = duration, default_value_t = Config::DRAIN_TIMEOUT.into())]
    pub drain_timeout: Duration,
}

impl DispatchArgs {
    pub fn config(self) -> DispatchConfig {
        let mut d = DispatchConfig::default();
        d.poll_interval = self.poll_interval.into();
        d.max_in_flight_per_partition = self.max_in_flight_per_partition;
        d.drain_timeout = self.drain_timeout.into();
        d
    }
}

/// Sessions and leases.
#[derive(Args)]
#[command(next_help_heading = "Leases")]
pub struct LeaseArgs {
    /// How often the session is heartbeated
    #[arg(long, env = "FEED_HEARTBEAT_INTERVAL", value_parser = duration, default_value_t = Config::HEARTBEAT_INTERVAL.into())]
    pub heartbeat_interval: Duration,
    /// A session silent this long is dead and its partitions are taken over
    #[arg(long, env = "FEED_SESSION_EXPIRY", value_parser = duration, default_value_t = Config::SESSION_EXPIRY.into())]
    pub session_expiry: Duration,
    /// How often leases are balanced across processors
    #[arg(long, env = "FEED_ACQUIRE_INTERVAL", value_parser = duration, default_value_t = Config::ACQUIRE_INTERVAL.into())]
    pub acquire_interval: Duration,
    /// Cap on partitions held by this processor [default: none]
    #[arg(long, env = "FEED_MAX_PARTITIONS")]
    pub max_partitions: Option<usize>,
}

impl LeaseArgs {
    pub fn config(self) -> LeaseConfig {
        let mut l = LeaseConfig::default();
        l.heartbeat_interval = self.heartbeat_interval.into();
        l.session_expiry = self.session_expiry.into();
        l.acquire_interval = self.acquire_interval.into();
        l.max_partitions = self.max_partitions;
        l
    }
}

/// Attempts and backoff of failed steps.
#[derive(Args)]
#[command(next_help_heading = "Retries")]
pub struct RetriesArgs {
    /// Attempts per step before an item fails; 0 = unlimited
    #[arg(long, env = "FEED_MAX_ATTEMPTS", default_value_t = Config::MAX_ATTEMPTS)]
    pub max_attempts: u32,
    /// Steps an item may take at one gate: the handler answering "not done" this many times in a
    /// row fails the item; 0 = unlimited
    #[arg(long, env = "FEED_MAX_STEPS", default_value_t = Config::MAX_STEPS)]
    pub max_steps: u32,
    /// First retry delay, doubled each attempt, with jitter
    #[arg(long, env = "FEED_BACKOFF_BASE", value_parser = duration, default_value_t = Config::BACKOFF_BASE.into())]
    pub backoff_base: Duration,
    /// Largest retry delay
    #[arg(long, env = "FEED_BACKOFF_MAX", value_parser = duration, default_value_t = Config::BACKOFF_MAX.into())]
    pub backoff_max: Duration,
}

impl RetriesArgs {
    pub fn config(self) -> Policy {
        Policy {
            max_attempts: self.max_attempts,
            max_steps: self.max_steps,
            backoff_base: self.backoff_base.into(),
            backoff_max: self.backoff_max.into(),
        }
    }
}

/// The fleet's rate toward the handler and the circuit breaker.
#[derive(Args)]
#[command(next_help_heading = "Flow control")]
pub struct FlowArgs {
    /// Items per second the whole fleet sends to the handler, e.g. 500/s or 30/m; shared through
    /// the database, so give every processor the same value [default: none]
    #[arg(long, env = "FEED_RATE_LIMIT")]
    pub rate_limit: Option<feed::limits::Rate>,
    /// Items the fleet may send at once after a quiet spell, on top of --rate-limit [default:
    /// 100 ms of the rate, at least twice --batch-size]
    #[arg(long, env = "FEED_RATE_BURST", requires = "rate_limit")]
    pub rate_burst: Option<u32>,
    /// Handler calls the circuit breaker looks back over (0 = no breaker); once half of them
    /// are seen and distinct items making up --breaker-ratio of them failed with 502-504, a
    /// timeout or a reset, dispatch holds off and probes one call at a time, and such failures
    /// count no attempt (a 500 is the handler answering: an attempt)
    #[arg(long, env = "FEED_BREAKER_CALLS", default_value_t = Config::BREAKER_CALLS)]
    pub breaker_calls: usize,
    /// Share of --breaker-calls whose distinct items failed with 502-504, a timeout or a reset
    /// that opens the breaker (each item counts once, so a few poison items never open it)
    #[arg(long, env = "FEED_BREAKER_RATIO", default_value_t = Config::BREAKER_RATIO)]
    pub breaker_ratio: f64,
}

impl FlowArgs {
    pub fn config(self) -> FlowConfig {
        let mut f = FlowConfig::default();
        f.rate_limit = self.rate_limit;
        f.rate_burst = self.rate_burst;
        f.breaker_calls = self.breaker_calls;
        f.breaker_ratio = self.breaker_ratio;
        f
    }
}

/// Completion events sent as webhooks.
#[derive(Args)]
#[command(next_help_heading = "Events")]
pub struct EventsArgs {
    /// POST completion events (a partition complete, failed or cancelled) here as signed JSON
    /// webhooks [default: off; events are still written to feed_events]
    #[arg(long, env = "FEED_EVENTS_URL", hide_env_values = true)]
    pub events_url: Option<String>,
    /// Extra event request header 'Name: value', repeatable [default: the --header values]
    #[arg(long = "events-header", env = "FEED_EVENTS_HEADER", value_parser = header, value_delimiter = '\n', hide_env_values = true)]
    pub events_headers: Vec<(String, String)>,
    #[command(flatten)]
    pub events_signing_secret: EventsSecretArgs,
    /// Delivery attempts per event before it is kept as failed (0 = unlimited); the backoff is
    /// --backoff-base and --backoff-max
    #[arg(long, env = "FEED_EVENTS_MAX_ATTEMPTS", default_value_t = Config::EVENTS_MAX_ATTEMPTS)]
    pub events_max_attempts: u32,
}

impl EventsArgs {
    pub fn config(self) -> EventsConfig {
        let mut e = EventsConfig::default();
        e.url = self.events_url;
        e.headers = (!self.events_headers.is_empty()).then_some(self.events_headers);
        e.signing_secrets = self.events_signing_secret.values();
        e.max_attempts = self.events_max_attempts;
        e
    }
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
pub struct HeaderFile(Vec<(String, String)>);

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
