//! The fleet's backlog by tenant: what is ready now and how long the
//! oldest ready item has waited, what is scheduled for later and what
//! waits out a retry's backoff. One statement over the available items
//! (the open-items index), grouped by the partition's tenant: its cost
//! grows with the available items, not with the history.

use std::time::{Duration, Instant};

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::Store;
use super::driver::sql;
use crate::Result;

/// One tenant's backlog. The JSON form is stable: fields are only added.
#[derive(Clone, Debug, PartialEq, Serialize, FromQueryResult)]
#[non_exhaustive]
pub struct TenantBacklog {
    /// The tenant; None for partitions of no tenant.
    pub tenant: Option<String>,
    /// Items ready now: available, at their partition's gate, their time
    /// come, their partition available and not paused.
    pub ready: i64,
    /// Milliseconds since the oldest ready item became ready (written,
    /// its time come, or its gate opened, whichever was last); None when
    /// nothing is ready.
    pub oldest_ready_ms: Option<i64>,
    /// Items scheduled for later by their producer (`not_before` ahead,
    /// no attempt yet).
    pub scheduled: i64,
    /// Items waiting out a retry's backoff (`not_before` ahead, attempts
    /// above 0).
    pub retrying: i64,
}

/// A count is reused for at least this long by [`Store::recent_backlog`].
const FRESH: Duration = Duration::from_secs(15);
/// A count is reused for at least this many times its own duration: with
/// millions of items available one count takes seconds, and the database
/// then spends at most 1/20 of a core on it.
const SPACING: u32 = 20;

/// The last count of this store (all its clones), with when it began and
/// how long it took.
#[derive(Debug, Default)]
pub(crate) struct Recent(tokio::sync::Mutex<Option<(Instant, Duration, Vec<TenantBacklog>)>>);

impl Store {
    /// The backlog by tenant as [`Store::backlog`] counts it, counted
    /// again only once the last count (by any clone of this store) is
    /// older than 15 s and 20 times its own duration: pages refreshing
    /// every few seconds and scripts polling the API cost one count per
    /// spell, however many ask.
    pub async fn recent_backlog(&self) -> Result<Vec<TenantBacklog>> {
        let mut last = self.recent.0.lock().await;
        if let Some((at, took, counted)) = &*last
            && at.elapsed() < FRESH.max(*took * SPACING)
        {
            return Ok(counted.clone());
        }
        let began = Instant::now();
        let counted = self.backlog().await?;
        *last = Some((began, began.elapsed(), counted.clone()));
        Ok(counted)
    }

    /// The backlog by tenant, tenants in name order (no tenant first);
    /// tenants with nothing available are left out.
    pub async fn backlog(&self) -> Result<Vec<TenantBacklog>> {
        // The moment an item became ready: the last of its write, its due
        // time and its gate's opening (GREATEST, written portably).
        let (w, d, g) = ("i.updated_at", "COALESCE(i.not_before, 0)", "p.gate_at");
        let since = format!(
            "CASE WHEN {w} >= {d} AND {w} >= {g} THEN {w} WHEN {d} >= {g} THEN {d} ELSE {g} END"
        );
        let ready = "p.status = 'available' AND NOT p.paused AND i.gate = p.gate \
                     AND (i.not_before IS NULL OR i.not_before <= {now})";
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT p.tenant AS tenant, \
                 COUNT(CASE WHEN " [ready] " THEN 1 END) AS ready, \
                 {now} - MIN(CASE WHEN " [ready] " THEN " [&since] " END) AS oldest_ready_ms, \
                 COUNT(CASE WHEN i.not_before > {now} AND i.attempts = 0 THEN 1 END) AS scheduled, \
                 COUNT(CASE WHEN i.not_before > {now} AND i.attempts > 0 THEN 1 END) AS retrying \
                 FROM feed_items i JOIN feed_partitions p ON p.id = i.partition_id \
                 WHERE i.status = 'available' GROUP BY p.tenant"
            ))
            .await?;
        let mut out = rows
            .iter()
            .map(|r| TenantBacklog::from_query_result(r, ""))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(out)
    }
}
