//! `feed_audit`: a record of every bulk action (one action on every
//! partition a filter matched): who, when, what, with which filter, and
//! how many partitions it matched and changed.

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::Store;
use super::driver::sql;
use crate::Result;

/// One bulk action as recorded. The JSON form is stable.
#[derive(Clone, Debug, Serialize, FromQueryResult)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Its number, in the order they were recorded.
    pub id: i64,
    /// When it ended (epoch ms, database clock).
    pub at: i64,
    /// Who acted: the API's admin token, or a console login.
    pub actor: String,
    /// retry, pause, resume or cancel.
    pub action: String,
    /// The filter, as `status=…, tenant=…, prefix=…`.
    pub filter: String,
    /// Partitions the filter matched.
    pub matched: i64,
    /// Of those, partitions the action changed (the rest it did not apply
    /// to: nothing failed to retry, already paused, finished).
    pub changed: i64,
}

impl Store {
    /// Records a bulk action.
    pub async fn record_audit(
        &self,
        actor: &str,
        action: &str,
        filter: &str,
        matched: u64,
        changed: u64,
    ) -> Result<()> {
        self.run(sql!(self.driver;
            "INSERT INTO feed_audit (at, actor, action, filter, matched, changed) VALUES ({now}, "
            {actor} ", " {action} ", " {filter} ", " {matched as i64} ", " {changed as i64} ")"
        ))
        .await?;
        Ok(())
    }

    /// The last `limit` bulk actions, newest first.
    pub async fn audit(&self, limit: u64) -> Result<Vec<AuditEntry>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT id, at, actor, action, filter, matched, changed FROM feed_audit \
                 ORDER BY id DESC LIMIT " {limit.min(500) as i64}
            ))
            .await?;
        rows.iter()
            .map(|r| Ok(AuditEntry::from_query_result(r, "")?))
            .collect()
    }
}
