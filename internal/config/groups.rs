//! The groups of a processor's settings, each with its defaults and its
//! checks: each subsystem takes only its own group.

use std::time::Duration;

use super::Config;
use super::signing::{SignatureScheme, check_secrets};
use crate::Result;

fn bad<T>(message: &str) -> Result<T> {
    Err(crate::Error::Config(message.into()))
}

/// The database: where it is, what stands in front of it, how long a
/// statement and a connection may live.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DatabaseConfig {
    /// sqlite, postgres or mysql URL; may carry a password, so never log it raw.
    pub url: String,
    /// What stands between Feed and PostgreSQL (`--db-pooler`).
    pub pooler: super::Pooler,
    /// A database connection older than this is closed when it goes back
    /// to the pool: the backstop that moves connections off a node that
    /// changed role without closing them.
    pub max_lifetime: Duration,
    /// Longest one database statement may take; a dead connection cannot
    /// answer at all, so without a limit whatever waits on it waits forever.
    pub statement_timeout: Duration,
    /// Apply migrations at start.
    pub migrate: bool,
    /// Where statements read the time; tests move it (see [`super::Clock`]).
    pub clock: super::Clock,
}

impl DatabaseConfig {
    /// The database at `url` with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        DatabaseConfig {
            url: url.into(),
            pooler: super::Pooler::None,
            max_lifetime: Config::MAX_LIFETIME,
            statement_timeout: Config::STATEMENT_TIMEOUT,
            migrate: true,
            clock: super::Clock::database(),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.statement_timeout.is_zero() {
            return bad("--statement-timeout must be above zero");
        }
        if self.max_lifetime < Duration::from_secs(1) {
            return bad(
                "--db-max-lifetime must be at least 1s, or connections would be opened for every statement",
            );
        }
        Ok(())
    }
}

/// How the handler is called: where, how many at once, in batches or
/// not, with which headers and signatures, and how much of its answers
/// is read.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HandlerConfig {
    /// Where items are POSTed.
    pub url: String,
    /// Handler calls at once.
    pub concurrency: usize,
    /// Per handler call.
    pub request_timeout: Duration,
    /// Items per handler request; 1 = one item per request, above 1 = the
    /// batch protocol (the book: Batches).
    pub batch_size: usize,
    /// How long a batch may wait for more items once some are ready and a
    /// request is already running; an idle processor sends at once.
    pub batch_wait: Duration,
    /// Extra request headers; values may be secrets.
    pub headers: Vec<(String, String)>,
    /// `Content-Type` of requests.
    pub content_type: String,
    /// HMAC-SHA256 signing secrets of requests: `whsec_<base64>` or raw
    /// text (the book: Verifying signatures); several during a rotation,
    /// each signing every request. Empty = unsigned.
    pub signing_secrets: Vec<String>,
    /// Which signatures requests carry (`--signature-scheme`).
    pub signature_scheme: SignatureScheme,
    /// Also sign with v1 (the body only) beside v2 (`--signature-v1`), for
    /// handlers that still check v1.
    pub signature_v1: bool,
    /// Largest handler response body accepted.
    pub max_response_bytes: usize,
    /// Bytes of handler answers held at once across all calls (read and
    /// waiting to be written); a larger answer waits for room.
    pub response_budget_bytes: usize,
}

impl HandlerConfig {
    /// The handler at `url` with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        HandlerConfig {
            url: url.into(),
            concurrency: Config::CONCURRENCY,
            request_timeout: Config::REQUEST_TIMEOUT,
            batch_size: Config::BATCH_SIZE,
            batch_wait: Config::BATCH_WAIT,
            headers: Vec::new(),
            content_type: Config::CONTENT_TYPE.into(),
            signing_secrets: Vec::new(),
            signature_scheme: SignatureScheme::Both,
            signature_v1: false,
            max_response_bytes: Config::MAX_RESPONSE_BYTES,
            response_budget_bytes: Config::RESPONSE_BUDGET_BYTES,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.concurrency == 0 {
            return bad("--concurrency must be at least 1");
        }
        if self.batch_size == 0 {
            return bad("--batch-size must be at least 1");
        }
        if self.response_budget_bytes < self.max_response_bytes {
            return bad(
                "--response-budget-bytes must be at least --max-response-bytes, or the largest answer could never be read",
            );
        }
        if self.signature_v1 && self.signature_scheme == SignatureScheme::Standard {
            return bad(
                "--signature-v1 adds v1 to Feed-Signature, which --signature-scheme standard does not send",
            );
        }
        check_secrets("--signing-secret", &self.signing_secrets)
    }
}

/// The dispatch loop's pace and caps.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DispatchConfig {
    /// How long to wait between polls when there is no work.
    pub poll_interval: Duration,
    /// Cap on one partition's items in flight at once, so that one
    /// partition cannot take every slot; None = no cap.
    pub max_in_flight_per_partition: Option<usize>,
    /// How long in-flight calls may finish after a shutdown signal.
    pub drain_timeout: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            poll_interval: Config::POLL_INTERVAL,
            max_in_flight_per_partition: None,
            drain_timeout: Config::DRAIN_TIMEOUT,
        }
    }
}

impl DispatchConfig {
    fn validate(&self) -> Result<()> {
        if self.max_in_flight_per_partition == Some(0) {
            return bad("--max-in-flight-per-partition must be at least 1");
        }
        if self.poll_interval.is_zero() {
            return bad("--poll-interval must be above zero");
        }
        Ok(())
    }
}

/// Sessions and leases: how often this processor says it is alive, when
/// a silent one is dead, and how often it leases, balances and steals.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaseConfig {
    /// How often the session row is heartbeated.
    pub heartbeat_interval: Duration,
    /// A session silent for this long is dead and its partitions are free.
    pub session_expiry: Duration,
    /// How often an acquire cycle runs (leasing, balancing, stealing).
    pub acquire_interval: Duration,
    /// Cap on partitions held by this processor.
    pub max_partitions: Option<usize>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            heartbeat_interval: Config::HEARTBEAT_INTERVAL,
            session_expiry: Config::SESSION_EXPIRY,
            acquire_interval: Config::ACQUIRE_INTERVAL,
            max_partitions: None,
        }
    }
}

impl LeaseConfig {
    fn validate(&self) -> Result<()> {
        if self.heartbeat_interval >= self.session_expiry {
            return bad("--heartbeat-interval must be shorter than --session-expiry");
        }
        if self.max_partitions == Some(0) {
            return bad("--max-partitions must be at least 1");
        }
        if self.acquire_interval.is_zero() {
            return bad("--acquire-interval must be above zero");
        }
        Ok(())
    }
}

/// Flow control toward the handler: the fleet's rate and the circuit
/// breaker.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FlowConfig {
    /// Items per second the whole fleet sends to the handler (`--rate-limit`).
    pub rate_limit: Option<crate::rate::Rate>,
    /// Items the fleet may send at once after a quiet spell (`--rate-burst`).
    pub rate_burst: Option<u32>,
    /// Handler calls the circuit breaker looks back over; 0 = no breaker.
    pub breaker_calls: usize,
    /// Share of those calls failing as an outage (5xx, timeout, broken
    /// connection) that opens the breaker.
    pub breaker_ratio: f64,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            rate_limit: None,
            rate_burst: None,
            breaker_calls: Config::BREAKER_CALLS,
            breaker_ratio: Config::BREAKER_RATIO,
        }
    }
}

impl FlowConfig {
    fn validate(&self) -> Result<()> {
        if !(self.breaker_ratio > 0.0 && self.breaker_ratio <= 1.0) {
            return bad("--breaker-ratio must be above 0 and at most 1, e.g. 0.5");
        }
        Ok(())
    }
}

/// The HTTP listener: health, metrics, and the console with its tokens.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ListenConfig {
    /// Address of the health and metrics listener; None = no listener.
    pub address: Option<String>,
    /// Serve the dashboard and its JSON API there.
    pub ui: bool,
    /// Allows actions from the dashboard and the API; None = read-only.
    pub admin_token: Option<super::AdminToken>,
    /// Allows enqueueing over the API (`POST /api/v1/partitions/{id}/items`)
    /// and nothing else (`--producer-token`); None = only the admin token may.
    pub producer_token: Option<super::ProducerToken>,
    /// Host names the console answers besides IP addresses and `localhost`
    /// (`--allowed-host`): a page on another name reaching it through DNS
    /// rebinding is refused.
    pub allowed_hosts: Vec<String>,
    /// Reverse proxies (addresses or networks) whose `X-Forwarded-For`
    /// names the client that wrong tokens count against
    /// (`--trusted-proxy`); none by default.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Where handlers reach this listener for a fan-in item's inputs
    /// (`Feed-Inputs`, `--inputs-url`); sent only while there is a listener.
    pub inputs_url: super::InputsUrl,
    /// How long an inputs URL stays valid; None = `--request-timeout`
    /// plus `--session-expiry`. Tests shorten it.
    pub inputs_ttl: Option<Duration>,
    /// Tenants that label metrics of their own (`--metrics-tenants`); the
    /// rest share "other". None = [`super::Config::METRICS_TENANTS`].
    pub metrics_tenants: Option<usize>,
}

impl ListenConfig {
    fn validate(&self) -> Result<()> {
        if self.ui && self.address.is_none() {
            return bad("--ui serves the dashboard on --listen, which is off");
        }
        if let super::InputsUrl::Base(base) = &self.inputs_url {
            super::InputsUrl::parse(base)?;
        }
        Ok(())
    }
}

/// Completion events sent as webhooks.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EventsConfig {
    /// Where completion events are POSTed (`--events-url`); None = they
    /// are only written to `feed_events`, for SQL readers.
    pub url: Option<String>,
    /// Extra headers of event requests; None = the handler's `headers`.
    pub headers: Option<Vec<(String, String)>>,
    /// Signing secrets of event requests; empty = the handler's `signing_secrets`.
    pub signing_secrets: Vec<String>,
    /// Delivery attempts per event before it is kept as failed; 0 = unlimited.
    pub max_attempts: u32,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            url: None,
            headers: None,
            signing_secrets: Vec::new(),
            max_attempts: Config::EVENTS_MAX_ATTEMPTS,
        }
    }
}

impl EventsConfig {
    fn validate(&self) -> Result<()> {
        check_secrets("--events-signing-secret", &self.signing_secrets)
    }
}

impl Config {
    /// Rejects settings that cannot work together.
    pub fn validate(&self) -> Result<()> {
        self.database.validate()?;
        self.handler.validate()?;
        self.dispatch.validate()?;
        self.leases.validate()?;
        self.flow.validate()?;
        self.listen.validate()?;
        self.events.validate()?;
        if self.retries.backoff_base < Config::MIN_BACKOFF {
            return bad(
                "--backoff-base must be at least 10ms, so that a failing item is never retried in a hot loop",
            );
        }
        if self.retries.backoff_base > self.retries.backoff_max {
            return bad("--backoff-base must not exceed --backoff-max");
        }
        Ok(())
    }
}
