//! Reading the processor's Prometheus text from `/metrics`.

use std::ops::AddAssign;

use serde::Serialize;

/// The value of a metric line (`name{labels} value`), 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Statements issued and items by outcome, as counted by the processor.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Outcomes {
    /// `feed_statements_total`.
    pub statements: u64,
    /// `feed_items_total` by outcome.
    pub done: u64,
    /// Moved to a next step.
    pub stepped: u64,
    /// Failed attempts that will be retried.
    pub retried: u64,
    /// Stale results.
    pub rejected: u64,
    /// Failed for good.
    pub failed: u64,
}

impl Outcomes {
    /// Reads them from `/metrics` text.
    pub fn parse(text: &str) -> Outcomes {
        let get = |series: &str| metric(text, series) as u64;
        let outcome = |o: &str| get(&format!("feed_items_total{{outcome=\"{o}\"}}"));
        Outcomes {
            statements: get("feed_statements_total"),
            done: outcome("done"),
            stepped: outcome("stepped"),
            retried: outcome("retried"),
            rejected: outcome("rejected"),
            failed: outcome("failed"),
        }
    }
}

/// Counts of several processors summed.
impl AddAssign for Outcomes {
    fn add_assign(&mut self, other: Outcomes) {
        self.statements += other.statements;
        self.done += other.done;
        self.stepped += other.stepped;
        self.retried += other.retried;
        self.rejected += other.rejected;
        self.failed += other.failed;
    }
}
