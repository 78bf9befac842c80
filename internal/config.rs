//! Settings of a running processor, with their defaults (the book: Reference, Command line).

use std::time::Duration;

/// How a processor runs. `cmd/processor` fills it from flags and `FEED_*`
/// variables; Rust programs build it with [`Config::new`] and adjust fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// sqlite, postgres or mysql URL; may carry a password, so never log it raw.
    pub database_url: String,
    /// Where items are POSTed.
    pub handler_url: String,
    /// Items in flight at once.
    pub concurrency: usize,
    /// How long to wait between polls when there is no work.
    pub poll_interval: Duration,
    /// How often the session row is heartbeated.
    pub heartbeat_interval: Duration,
    /// A session silent for this long is dead and its partitions are free.
    pub session_expiry: Duration,
    /// How often an acquire cycle runs (leasing, balancing, stealing).
    pub acquire_interval: Duration,
    /// Cap on partitions held by this processor.
    pub max_partitions: Option<usize>,
    /// Cap on one partition's items in flight at once, so that one
    /// partition cannot take every slot; None = no cap.
    pub max_in_flight_per_partition: Option<usize>,
    /// Per handler call.
    pub request_timeout: Duration,
    /// Attempts per step before an item fails; 0 = unlimited.
    pub max_attempts: u32,
    /// First retry delay; doubles each attempt.
    pub backoff_base: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
    /// Extra request headers; values may be secrets.
    pub headers: Vec<(String, String)>,
    /// HMAC-SHA256 signing secrets of requests: `whsec_<base64>` or raw
    /// text (the book: Verifying signatures); several during a rotation, each signing
    /// every request. Empty = unsigned.
    pub signing_secrets: Vec<String>,
    /// Which signatures requests carry (`--signature-scheme`).
    pub signature_scheme: crate::handler::SignatureScheme,
    /// `Content-Type` of requests.
    pub content_type: String,
    /// Also sign with v1 (the body only) beside v2 (`--signature-v1`), for
    /// handlers that still check v1.
    pub signature_v1: bool,
    /// Largest handler response body accepted.
    pub max_response_bytes: usize,
    /// Bytes of handler answers held at once across all calls (read and
    /// waiting to be written); a larger answer waits for room.
    pub response_budget_bytes: usize,
    /// Address of the health and metrics listener; None = no listener.
    pub listen: Option<String>,
    /// How long in-flight calls may finish after a shutdown signal.
    pub drain_timeout: Duration,
    /// Longest one database statement may take; a dead connection cannot
    /// answer at all, so without a limit whatever waits on it waits forever.
    pub statement_timeout: Duration,
    /// A database connection older than this is closed when it goes back
    /// to the pool: the backstop that moves connections off a node that
    /// changed role without closing them.
    pub db_max_lifetime: Duration,
    /// What stands between Feed and PostgreSQL (`--db-pooler`).
    pub db_pooler: crate::store::Pooler,
    /// Apply migrations at start.
    pub migrate: bool,
    /// Serve the dashboard and its JSON API on `listen`.
    pub ui: bool,
    /// Allows actions from the dashboard and the API; None = read-only.
    pub admin_token: Option<crate::console::AdminToken>,
    /// Allows enqueueing over the API (`POST /api/v1/partitions/{id}/items`)
    /// and nothing else (`--producer-token`); None = only the admin token may.
    pub producer_token: Option<crate::console::ProducerToken>,
    /// Host names the console answers besides IP addresses and `localhost`
    /// (`--allowed-host`): a page on another name reaching it through DNS
    /// rebinding is refused.
    pub allowed_hosts: Vec<String>,
    /// Reverse proxies (addresses or networks) whose `X-Forwarded-For`
    /// names the client that wrong tokens count against
    /// (`--trusted-proxy`); none by default.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Prune finished partitions older than this every few minutes; None = keep them.
    pub retention: Option<Duration>,
    /// Items per handler request; 1 = one item per request, above 1 = the
    /// batch protocol (the book: Batches).
    pub batch_size: usize,
    /// How long a batch may wait for more items once some are ready and a
    /// request is already running; an idle processor sends at once.
    pub batch_wait: Duration,
    /// Where completion events are POSTed (`--events-url`); None = they
    /// are only written to `feed_events`, for SQL readers.
    pub events_url: Option<String>,
    /// Extra headers of event requests; None = the handler's `headers`.
    pub events_headers: Option<Vec<(String, String)>>,
    /// Signing secrets of event requests; empty = the handler's `signing_secrets`.
    pub events_signing_secrets: Vec<String>,
    /// Delivery attempts per event before it is kept as failed; 0 = unlimited.
    pub events_max_attempts: u32,
    /// Items per second the whole fleet sends to the handler (`--rate-limit`).
    pub rate_limit: Option<crate::limits::Rate>,
    /// Items the fleet may send at once after a quiet spell (`--rate-burst`).
    pub rate_burst: Option<u32>,
    /// Handler calls the circuit breaker looks back over; 0 = no breaker.
    pub breaker_calls: usize,
    /// Share of those calls failing as an outage (5xx, timeout, broken
    /// connection) that opens the breaker.
    pub breaker_ratio: f64,
}

impl Config {
    /// `--database-url`: an SQLite file next to the processor.
    pub const DATABASE_URL: &str = "sqlite://feed.db?mode=rwc";
    /// `--concurrency`.
    pub const CONCURRENCY: usize = 64;
    /// `--poll-interval`.
    pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
    /// `--heartbeat-interval`.
    pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
    /// `--session-expiry`.
    pub const SESSION_EXPIRY: Duration = Duration::from_secs(10);
    /// `--acquire-interval`.
    pub const ACQUIRE_INTERVAL: Duration = Duration::from_secs(2);
    /// `--request-timeout`.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
    /// `--max-attempts`.
    pub const MAX_ATTEMPTS: u32 = 5;
    /// `--backoff-base`.
    pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
    /// `--backoff-max`.
    pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
    /// `--content-type`.
    pub const CONTENT_TYPE: &str = "application/json";
    /// `--max-response-bytes`: 16 MiB.
    pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
    /// The smallest `--backoff-base`: every retry waits at least this.
    pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
    /// `--response-budget-bytes`: 16 MiB, one answer of the largest size.
    pub const RESPONSE_BUDGET_BYTES: usize = 16 << 20;
    /// `--listen` of the command line. [`Config::new`] listens nowhere: a
    /// program embedding Feed chooses whether and where to serve health.
    pub const LISTEN: &str = "127.0.0.1:8080";
    /// `--drain-timeout`.
    pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
    /// `--batch-size`: one item per request, the single-item protocol.
    pub const BATCH_SIZE: usize = 1;
    /// `--batch-wait`.
    pub const BATCH_WAIT: Duration = Duration::from_millis(5);
    /// `--events-max-attempts`: with the default backoff, about an hour
    /// and a half of a receiver being down.
    pub const EVENTS_MAX_ATTEMPTS: u32 = 25;
    /// `--breaker-calls`.
    pub const BREAKER_CALLS: usize = 20;
    /// `--breaker-ratio`.
    pub const BREAKER_RATIO: f64 = 0.5;
    /// `--statement-timeout`.
    pub const STATEMENT_TIMEOUT: Duration = crate::store::DEFAULT_STATEMENT_TIMEOUT;

    /// A configuration with the defaults above.
    pub fn new(database_url: impl Into<String>, handler_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            handler_url: handler_url.into(),
            concurrency: Self::CONCURRENCY,
            poll_interval: Self::POLL_INTERVAL,
            heartbeat_interval: Self::HEARTBEAT_INTERVAL,
            session_expiry: Self::SESSION_EXPIRY,
            acquire_interval: Self::ACQUIRE_INTERVAL,
            max_partitions: None,
            max_in_flight_per_partition: None,
            request_timeout: Self::REQUEST_TIMEOUT,
            max_attempts: Self::MAX_ATTEMPTS,
            backoff_base: Self::BACKOFF_BASE,
            backoff_max: Self::BACKOFF_MAX,
            headers: Vec::new(),
            signing_secrets: Vec::new(),
            signature_scheme: crate::handler::SignatureScheme::Both,
            content_type: Self::CONTENT_TYPE.into(),
            signature_v1: false,
            max_response_bytes: Self::MAX_RESPONSE_BYTES,
            response_budget_bytes: Self::RESPONSE_BUDGET_BYTES,
            listen: None,
            drain_timeout: Self::DRAIN_TIMEOUT,
            statement_timeout: Self::STATEMENT_TIMEOUT,
            db_max_lifetime: crate::store::Options::MAX_LIFETIME,
            db_pooler: crate::store::Pooler::None,
            migrate: true,
            ui: false,
            admin_token: None,
            producer_token: None,
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            retention: None,
            batch_size: Self::BATCH_SIZE,
            batch_wait: Self::BATCH_WAIT,
            events_url: None,
            events_headers: None,
            events_signing_secrets: Vec::new(),
            events_max_attempts: Self::EVENTS_MAX_ATTEMPTS,
            rate_limit: None,
            rate_burst: None,
            breaker_calls: Self::BREAKER_CALLS,
            breaker_ratio: Self::BREAKER_RATIO,
        }
    }

    /// Rejects settings that cannot work together.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::Config(m.into()));
        if self.concurrency == 0 {
            return bad("--concurrency must be at least 1");
        }
        if self.batch_size == 0 {
            return bad("--batch-size must be at least 1");
        }
        if self.heartbeat_interval >= self.session_expiry {
            return bad("--heartbeat-interval must be shorter than --session-expiry");
        }
        if self.backoff_base < Self::MIN_BACKOFF {
            return bad(
                "--backoff-base must be at least 10ms, so that a failing item is never retried in a hot loop",
            );
        }
        if self.backoff_base > self.backoff_max {
            return bad("--backoff-base must not exceed --backoff-max");
        }
        if self.response_budget_bytes < self.max_response_bytes {
            return bad(
                "--response-budget-bytes must be at least --max-response-bytes, or the largest answer could never be read",
            );
        }
        if self.max_partitions == Some(0) {
            return bad("--max-partitions must be at least 1");
        }
        if self.max_in_flight_per_partition == Some(0) {
            return bad("--max-in-flight-per-partition must be at least 1");
        }
        if self.statement_timeout.is_zero() {
            return bad("--statement-timeout must be above zero");
        }
        if self.db_max_lifetime < Duration::from_secs(1) {
            return bad(
                "--db-max-lifetime must be at least 1s, or connections would be opened for every statement",
            );
        }
        if self.poll_interval.is_zero() || self.acquire_interval.is_zero() {
            return bad("--poll-interval and --acquire-interval must be above zero");
        }
        if !(self.breaker_ratio > 0.0 && self.breaker_ratio <= 1.0) {
            return bad("--breaker-ratio must be above 0 and at most 1, e.g. 0.5");
        }
        if self.signature_v1 && self.signature_scheme == crate::handler::SignatureScheme::Standard {
            return bad(
                "--signature-v1 adds v1 to Feed-Signature, which --signature-scheme standard does not send",
            );
        }
        use crate::handler::Signer;
        Signer::new(
            "--signing-secret",
            &self.signing_secrets,
            self.signature_scheme,
            false,
        )?;
        let events = &self.events_signing_secrets;
        Signer::new(
            "--events-signing-secret",
            events,
            self.signature_scheme,
            false,
        )?;
        if self.ui && self.listen.is_none() {
            return bad("--ui serves the dashboard on --listen, which is off");
        }
        Ok(())
    }
}
