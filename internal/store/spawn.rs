//! A handler's answer that spawns items (`"items"`): the answering item's
//! result and its children in one transaction under the result's fence,
//! so an answer applied twice (or by a processor that lost the partition)
//! adds nothing, and a gate cannot advance between the two.

use std::time::Duration;

use super::insert::{insert_items, statements, wake};
use super::{Ack, NewItem, Store, Written};
use crate::{Error, Result};

impl Store {
    /// Writes `ack` and inserts `items` into its partition. Stale (nothing
    /// written) when the result's fence does not hold; Refused, with
    /// nothing written, when a child's id exists already.
    pub(crate) async fn write_spawning(
        &self,
        ack: &Ack,
        items: &[NewItem],
        expiry: Duration,
    ) -> Result<Written> {
        let b = self.driver;
        let partition = ack.fence.partition_id.to_string();
        let Some(txn) = self.begin_fenced(ack, expiry).await? else {
            return Ok(Written::Stale);
        };
        let mut count = 1;
        for run in statements(items) {
            count += 1;
            match self
                .bounded(insert_items(&txn, b, &partition, ack.fence.gate, run))
                .await
            {
                Ok(()) => {}
                Err(Error::Invalid(why)) => {
                    self.bounded(txn.rollback()).await?;
                    return Ok(Written::Refused(format!(
                        "the answer's items were not added: {why}"
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        if !items.is_empty() {
            self.bounded(wake(&txn, b)).await?;
        }
        self.bounded(self.commit(txn)).await?;
        self.count(count);
        Ok(Written::Yes)
    }
}
