//! Prometheus metrics, served as text on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `outcome` label of `feed_items`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// done, stepped, retried, failed or rejected.
    pub outcome: &'static str,
}

/// Every series Feed exports.
#[derive(Debug)]
pub struct Metrics {
    /// Handler results by what they did to the item.
    pub items: Family<OutcomeLabel, Counter>,
    /// Handler call latency.
    pub handler_seconds: Histogram,
    /// Items being delivered now.
    pub in_flight: Gauge,
    /// Partitions this processor holds.
    pub partitions_held: Gauge,
    /// Gate advances written.
    pub gate_advances: Counter,
    /// Partitions closed as complete.
    pub partitions_closed: Counter,
    /// Partitions marked failed.
    pub partitions_failed: Counter,
    /// Partitions taken from another live session.
    pub steals: Counter,
    /// Partitions this processor lost (stolen, released or session expired).
    pub leases_lost: Counter,
    /// Times this processor's session was found dead.
    pub sessions_lost: Counter,
    /// Live sessions, as of the last balance.
    pub sessions_alive: Gauge,
    /// Deliveries that found the handler unreachable (no attempt counted).
    pub handler_unreachable: Counter,
    /// Available items in held partitions, as of the last acquire cycle.
    pub backlog: Gauge,
    /// Database statement attempts cut off by `--statement-timeout`.
    pub statement_timeouts: Counter,
}

impl Metrics {
    /// Creates the metrics and registers them under `feed_`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Metrics {
            items: Family::default(),
            handler_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            in_flight: Gauge::default(),
            partitions_held: Gauge::default(),
            gate_advances: Counter::default(),
            partitions_closed: Counter::default(),
            partitions_failed: Counter::default(),
            steals: Counter::default(),
            leases_lost: Counter::default(),
            sessions_lost: Counter::default(),
            sessions_alive: Gauge::default(),
            handler_unreachable: Counter::default(),
            backlog: Gauge::default(),
            statement_timeouts: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("feed");
        r.register("items", "Handler results by outcome", m.items.clone());
        r.register(
            "handler_request_duration_seconds",
            "Handler call latency",
            m.handler_seconds.clone(),
        );
        r.register(
            "items_in_flight",
            "Items being delivered now",
            m.in_flight.clone(),
        );
        r.register(
            "partitions_held",
            "Partitions held by this processor",
            m.partitions_held.clone(),
        );
        r.register("gate_advances", "Gate advances", m.gate_advances.clone());
        r.register(
            "partitions_closed",
            "Partitions closed as complete",
            m.partitions_closed.clone(),
        );
        r.register(
            "partitions_failed",
            "Partitions marked failed",
            m.partitions_failed.clone(),
        );
        r.register(
            "steals",
            "Partitions stolen from other sessions",
            m.steals.clone(),
        );
        r.register(
            "leases_lost",
            "Partitions lost to others or to an expired session",
            m.leases_lost.clone(),
        );
        r.register(
            "sessions_lost",
            "Times this processor's session was found dead",
            m.sessions_lost.clone(),
        );
        r.register(
            "sessions_alive",
            "Live processor sessions",
            m.sessions_alive.clone(),
        );
        r.register(
            "backlog_items",
            "Available items in held partitions (as of the last acquire cycle)",
            m.backlog.clone(),
        );
        r.register(
            "handler_unreachable",
            "Deliveries that could not reach the handler (no attempt counted)",
            m.handler_unreachable.clone(),
        );
        r.register(
            "statement_timeouts",
            "Database statements cut off by --statement-timeout (their connections are closed)",
            m.statement_timeouts.clone(),
        );
        m
    }

    /// Counts one handler result.
    pub fn outcome(&self, outcome: &'static str) {
        self.items.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}
