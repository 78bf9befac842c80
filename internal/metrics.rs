//! Prometheus metrics, served as text on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The `outcome` label of `feed_items`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabel {
    /// done, stepped, retried, failed or rejected.
    pub outcome: &'static str,
}

/// The `tenant` label: a partition's tenant, "" for partitions of no
/// tenant, and "other" for tenants past the first [`Tenants`] cap seen
/// (the number of series stays bounded however many tenants there are).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TenantLabel {
    pub tenant: String,
}

/// The tenants given a label of their own, up to a cap
/// (`--metrics-tenants`); the rest share "other".
#[derive(Debug)]
pub(crate) struct Tenants {
    cap: AtomicUsize,
    seen: Mutex<HashSet<String>>,
}

impl Default for Tenants {
    fn default() -> Self {
        Tenants {
            cap: AtomicUsize::new(crate::Config::METRICS_TENANTS),
            seen: Mutex::default(),
        }
    }
}

impl Tenants {
    /// Sets how many tenants get a label of their own.
    pub(crate) fn set_cap(&self, cap: usize) {
        self.cap.store(cap, Ordering::Relaxed);
    }

    /// The label of `tenant` (None: a partition of no tenant).
    pub(crate) fn label(&self, tenant: Option<&str>) -> TenantLabel {
        let Some(t) = tenant else {
            return TenantLabel {
                tenant: String::new(),
            };
        };
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let tenant = if seen.contains(t) {
            t.to_string()
        } else if seen.len() < self.cap.load(Ordering::Relaxed) {
            seen.insert(t.to_string());
            t.to_string()
        } else {
            "other".to_string()
        };
        TenantLabel { tenant }
    }
}

/// The labels of `feed_tenant_items`: a tenant and an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TenantOutcomeLabel {
    pub tenant: String,
    /// As [`OutcomeLabel`]'s.
    pub outcome: &'static str,
}

/// Handler call latency's buckets (as `feed_handler_request_duration_seconds`).
fn call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// A queue wait's buckets: 1 ms to about 4.6 hours.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 24))
}

/// A gauge of seconds.
type Seconds = Gauge<f64, AtomicU64>;

/// Declares [`Metrics`] once per series: its field, type, initial value,
/// exported name (under `feed_`) and help text.
macro_rules! metrics {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $init:expr, $name:literal, $help:literal;)*) => {
        /// Every series Feed exports.
        #[derive(Debug)]
        pub(crate) struct Metrics {
            $($(#[$doc])* pub(crate) $field: $ty,)*
            /// The tenants that label series of their own.
            pub(crate) tenants: Tenants,
            /// The last five minutes, for the session row.
            pub(crate) recent: crate::recent::Recent,
        }

        impl Metrics {
            /// Creates the metrics and registers them under `feed_`.
            pub(crate) fn new(registry: &mut Registry) -> Self {
                let m = Metrics { $($field: $init,)* tenants: Tenants::default(), recent: Default::default() };
                let r = registry.sub_registry_with_prefix("feed");
                $(r.register($name, $help, m.$field.clone());)*
                m
            }
        }
    };
}

metrics! {
    /// Handler results by what they did to the item.
    items: Family<OutcomeLabel, Counter> = Family::default(), "items",
        "Handler results by outcome: done, stepped, retried, failed, rejected (stale, not written)";
    /// Handler call latency.
    handler_seconds: Histogram = Histogram::new(exponential_buckets(0.001, 2.0, 16)),
        "handler_request_duration_seconds", "Handler call latency";
    /// Items being delivered now.
    in_flight: Gauge = Gauge::default(), "items_in_flight", "Deliveries in progress";
    /// Partitions this processor holds.
    partitions_held: Gauge = Gauge::default(), "partitions_held", "Partitions held by this processor";
    /// Gate advances written.
    gate_advances: Counter = Counter::default(), "gate_advances", "Gate advances";
    /// Partitions closed as complete.
    partitions_closed: Counter = Counter::default(), "partitions_closed", "Partitions closed as complete";
    /// Partitions marked failed.
    partitions_failed: Counter = Counter::default(), "partitions_failed", "Partitions marked failed";
    /// Acquire cycles run (full cycles and leasing steps).
    acquire_cycles: Counter = Counter::default(), "acquire_cycles",
        "Acquire cycles run (full cycles and the leasing steps between them)";
    /// Partitions taken from another live session.
    steals: Counter = Counter::default(), "steals", "Partitions taken from another live processor";
    /// Partitions this processor lost (stolen, released or session expired).
    leases_lost: Counter = Counter::default(), "leases_lost",
        "Partitions lost (taken, released, or the session expired)";
    /// Times this processor's session was found dead.
    sessions_lost: Counter = Counter::default(), "sessions_lost",
        "Times this processor's session was found dead";
    /// Live sessions, as of the last acquire cycle.
    sessions_alive: Gauge = Gauge::default(), "sessions_alive",
        "Live processors, as of the last acquire cycle";
    /// Available items in held partitions, counted once per sweep.
    backlog: Gauge = Gauge::default(), "backlog_items",
        "Available items in held partitions, counted up to 100,000 at most every 30 s (at the start of a sweep of the held partitions)";
    /// Deliveries that found the handler unreachable (no attempt counted).
    handler_unreachable: Counter = Counter::default(), "handler_unreachable",
        "Deliveries that could not reach the handler (no attempt counted)";
    /// Completion events the receiver accepted.
    events_delivered: Counter = Counter::default(), "events_delivered",
        "Completion events the receiver at --events-url accepted";
    /// Event delivery attempts that failed and will be tried again.
    events_retried: Counter = Counter::default(), "events_retried",
        "Event delivery attempts that failed and will be tried again";
    /// Events given up on (refused, or out of attempts) and kept as failed.
    events_failed: Counter = Counter::default(), "events_failed",
        "Events given up on (refused, or out of attempts) and kept as failed";
    /// Events waiting to be delivered, as the sender last counted them.
    events_pending: Gauge = Gauge::default(), "events_pending",
        "Completion events waiting to be delivered (counted every 10 s by the processor that sends events; 0 on the others)";
    /// Events kept as failed, as the sender last counted them.
    events_undeliverable: Gauge = Gauge::default(), "events_undeliverable",
        "Completion events kept as failed (counted every 10 s by the processor that sends events; 0 on the others)";
    /// 1 while the circuit breaker is open.
    breaker_open: Gauge = Gauge::default(), "breaker_open",
        "1 while the circuit breaker is open (handler calls failing as an outage)";
    /// Handler answers that said "too many" (429, or 503 with Retry-After).
    throttled: Counter = Counter::default(), "throttled",
        "Handler calls answered 429, or 503 with Retry-After (too many)";
    /// The adaptive rate after throttle answers; 0 = not limited.
    adaptive_rate: Gauge = Gauge::default(), "adaptive_rate",
        "Items per second this processor holds itself to after such answers (0 = not held back)";
    /// Since when dispatch holds off (Unix seconds); 0 while it dispatches.
    held_off_since: Gauge = Gauge::default(), "held_off_since_seconds",
        "Unix time since which dispatch holds off (handler not there, breaker open); 0 while it dispatches";
    /// Times the circuit breaker opened.
    breaker_trips: Counter = Counter::default(), "breaker_trips",
        "Times the circuit breaker opened";
    /// Handler calls sent as probes while dispatch held off.
    probes: Counter = Counter::default(), "handler_probes",
        "Handler calls sent as probes, one at a time, while dispatch held off (the handler unreachable or the breaker open)";
    /// Handler call latency by tenant.
    tenant_handler_seconds: Family<TenantLabel, Histogram, fn() -> Histogram> = Family::new_with_constructor(call_histogram),
        "tenant_handler_request_duration_seconds",
        "Handler call latency by tenant (a batch holding items of several tenants counts for each)";
    /// Handler results by tenant and outcome.
    tenant_items: Family<TenantOutcomeLabel, Counter> = Family::default(), "tenant_items",
        "Handler results by tenant and outcome (as feed_items_total)";
    /// How long items waited, from ready to delivered, by tenant.
    queue_wait: Family<TenantLabel, Histogram, fn() -> Histogram> = Family::new_with_constructor(wait_histogram),
        "queue_wait_seconds",
        "How long items waited from the moment they became ready (written, their time come, their retry due, their gate opened) to their delivery, by tenant";
    /// Ready items across the fleet, by tenant, as the counter last saw.
    backlog_ready: Family<TenantLabel, Gauge> = Family::default(), "backlog_ready_items",
        "Items ready now across the fleet (available, at their partition's gate, their time come, their partition not paused), by tenant; counted at most every 15 s by one processor (the others export none)";
    /// Age of the oldest ready item, by tenant.
    backlog_oldest: Family<TenantLabel, Seconds> = Family::default(), "backlog_oldest_ready_seconds",
        "Age of the oldest ready item, from the moment it became ready, by tenant; counted with feed_backlog_ready_items";
    /// Items waiting for a time set by their producer, by tenant.
    backlog_scheduled: Family<TenantLabel, Gauge> = Family::default(), "backlog_scheduled_items",
        "Items scheduled for later (not_before in the future, no attempt yet), by tenant; counted with feed_backlog_ready_items";
    /// Items waiting out a retry's backoff, by tenant.
    backlog_retrying: Family<TenantLabel, Gauge> = Family::default(), "backlog_retrying_items",
        "Items waiting out a retry's backoff (not_before in the future, attempts above 0), by tenant; counted with feed_backlog_ready_items";
    /// SQL statements issued through the store (all its clones).
    statements: Counter = Counter::default(), "statements",
        "SQL statements issued by this processor";
    /// Database statement attempts cut off by `--statement-timeout`.
    statement_timeouts: Counter = Counter::default(), "statement_timeouts",
        "Statement attempts cut off by --statement-timeout, or heartbeats by half the session expiry (their connections are closed)";
}

impl Metrics {
    /// Counts one handler result, of an item of `tenant`.
    pub(crate) fn outcome(&self, outcome: &'static str, tenant: &TenantLabel) {
        self.items.get_or_create(&OutcomeLabel { outcome }).inc();
        let tenant = tenant.tenant.clone();
        let label = TenantOutcomeLabel { tenant, outcome };
        self.tenant_items.get_or_create(&label).inc();
    }
}
