//! Settings of a running processor, with their defaults (the book: Reference, Command line).

use std::time::Duration;

mod groups;
mod policy;
pub mod signing;
mod values;

pub use groups::{
    DatabaseConfig, DispatchConfig, EventsConfig, FlowConfig, HandlerConfig, LeaseConfig,
    ListenConfig,
};
pub use policy::Policy;
pub use values::{AdminToken, Clock, InputsUrl, Pooler, ProducerToken};

/// How a processor runs, in groups: each subsystem takes only its own.
/// `cmd/processor` fills it from flags and `FEED_*` variables; Rust
/// programs build it with [`Config::new`] and adjust fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// The database.
    pub database: DatabaseConfig,
    /// How the handler is called.
    pub handler: HandlerConfig,
    /// The dispatch loop's pace and caps.
    pub dispatch: DispatchConfig,
    /// Sessions and leases.
    pub leases: LeaseConfig,
    /// Attempts and backoff of failed steps.
    pub retries: Policy,
    /// The fleet's rate toward the handler and the circuit breaker.
    pub flow: FlowConfig,
    /// Health, metrics and the console.
    pub listen: ListenConfig,
    /// Completion events sent as webhooks.
    pub events: EventsConfig,
    /// Prune finished partitions older than this every few minutes; None = keep them.
    pub retention: Option<Duration>,
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
    /// `--max-steps`.
    pub const MAX_STEPS: u32 = 100;
    /// `--backoff-base`.
    pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
    /// `--backoff-max`.
    pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
    /// `--metrics-tenants`: tenants that label series of their own.
    pub const METRICS_TENANTS: usize = 50;
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
    pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long a pooled connection lives, `--db-max-lifetime` (sqlx's
    /// default).
    pub const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

    /// A configuration with the defaults above.
    pub fn new(database_url: impl Into<String>, handler_url: impl Into<String>) -> Self {
        Self {
            database: DatabaseConfig::new(database_url),
            handler: HandlerConfig::new(handler_url),
            dispatch: DispatchConfig::default(),
            leases: LeaseConfig::default(),
            retries: Policy {
                max_attempts: Self::MAX_ATTEMPTS,
                max_steps: Self::MAX_STEPS,
                backoff_base: Self::BACKOFF_BASE,
                backoff_max: Self::BACKOFF_MAX,
            },
            flow: FlowConfig::default(),
            listen: ListenConfig::default(),
            events: EventsConfig::default(),
            retention: None,
        }
    }
}
