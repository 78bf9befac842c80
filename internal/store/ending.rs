//! A handler's answer that ends its partition (`"partition": "complete"`,
//! `"cancel"` or `"fail"`): the item's result, the rest of the partition
//! cancelled and the partition's new status, in one transaction under
//! the result's fence, so an answer applied twice (or by a processor that
//! lost the partition) ends nothing.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseTransaction};

use super::driver::{result_statement, sql};
use super::outbox::Happened;
use super::{Ack, Store, Written};
use crate::Result;
use crate::status::PartitionEnd;

impl Store {
    /// A transaction that has written `ack` under its fence, for the
    /// writes that must come with it; None (nothing written) when the
    /// fence does not hold.
    pub(super) async fn begin_fenced(
        &self,
        ack: &Ack,
        expiry: Duration,
    ) -> Result<Option<DatabaseTransaction>> {
        let txn = self.begin_write().await?;
        let stored = self
            .bounded(txn.execute_raw(result_statement(self.driver, ack, expiry)))
            .await?
            .rows_affected();
        if stored != 1 {
            self.bounded(txn.rollback()).await?;
            self.count(1);
            return Ok(None);
        }
        Ok(Some(txn))
    }

    /// Writes `ack` and ends its partition as `end` says: its available
    /// items are cancelled and it gets `end`'s status and no owner; its
    /// completion event is written with it. Stale (nothing written) when
    /// the result's fence does not hold.
    pub(crate) async fn end_partition(
        &self,
        ack: &Ack,
        end: PartitionEnd,
        expiry: Duration,
    ) -> Result<Written> {
        let b = self.driver;
        let id = ack.fence.partition_id.clone();
        let Some(txn) = self.begin_fenced(ack, expiry).await? else {
            return Ok(Written::Stale);
        };
        self.bounded(txn.execute_raw(sql!(b;
            "UPDATE feed_items SET status = 'cancelled', version = version + 1, updated_at = {now} \
             WHERE partition_id = " {id.clone()} " AND status = 'available'"
        )))
        .await?;
        self.bounded(txn.execute_raw(sql!(b;
            "UPDATE feed_partitions SET status = " {end.status().as_str()} ", owner = NULL, \
             version = version + 1, updated_at = {now} WHERE id = " {id.clone()} " AND owner = " {ack.session.clone()}
        )))
        .await?;
        let ended = Happened::Ended(end.status());
        self.record_events(&txn, ended, std::slice::from_ref(&id))
            .await?;
        self.bounded(self.commit(txn)).await?;
        self.count(4);
        Ok(Written::Yes)
    }
}
