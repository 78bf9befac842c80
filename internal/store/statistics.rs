//! PostgreSQL's planner statistics and autovacuum, which Feed looks after:
//! a bulk load leaves the planner planning for a table of a few rows.

use super::driver::sql;
use super::{Store, get};
use crate::Result;

/// A table whose rows changed since its last analyze more than this many
/// times over what the planner believes it holds is analyzed again: a bulk
/// load makes a table many times larger than PostgreSQL believes until
/// autovacuum analyzes it (a minute later, or never with autovacuum off),
/// and meanwhile it plans every statement for a table of a few rows (a
/// probe of one partition's items became a scan of ten million).
const STALE_FACTOR: i64 = 4;

/// Changes below this never make statistics stale: small tables are cheap
/// whatever the plan.
const STALE_FROM: i64 = 10_000;

impl Store {
    /// On PostgreSQL, analyzes `feed_partitions` and `feed_items` when
    /// either changed far more since its last analyze than the planner
    /// believes it holds; true when it did. One catalog read otherwise.
    pub(crate) async fn refresh_statistics(&self) -> Result<bool> {
        let Some(stale) = self.driver.stale_statistics(STALE_FROM, STALE_FACTOR) else {
            return Ok(false);
        };
        let rows = self.fetch(stale).await?;
        let stale: i64 = rows.first().map_or(Ok(0), |r| get(r, "n"))?;
        if stale == 0 {
            return Ok(false);
        }
        self.run(sql!(self.driver; "ANALYZE feed_partitions, feed_items"))
            .await?;
        Ok(true)
    }
}

impl Store {
    /// On PostgreSQL, whether the server runs without autovacuum: Feed's
    /// tables then keep every dead row version and the planner's statistics
    /// from their last analyze, and statements slow down as work goes on.
    pub(crate) async fn autovacuum_off(&self) -> Result<bool> {
        let Some(off) = self.driver.autovacuum_off() else {
            return Ok(false);
        };
        let rows = self.fetch(off).await?;
        rows.first().map_or(Ok(false), |r| get(r, "off"))
    }
}
