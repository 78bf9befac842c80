//! The fleet's backlog by tenant: what is ready now and how long the
//! oldest ready item has waited, what is scheduled for later and what
//! waits out a retry's backoff. One statement over the available items
//! (the open-items index), grouped by the partition's tenant: its cost
//! grows with the available items, not with the history.

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

impl Store {
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
