//! Running the writes whose changed rows are wanted (the driver builds
//! them, `driver::Returning`): a statement that returns its rows, or a
//! write and the read of its rows, together in one transaction if need be.

use sea_orm::{ConnectionTrait, DatabaseTransaction, QueryResult};

use super::driver::Returning;
use super::{Store, get};
use crate::Result;
use crate::ids::PartitionId;

impl Store {
    /// The rows `r` changed.
    pub(super) async fn returning(&self, r: Returning) -> Result<Vec<QueryResult>> {
        match r {
            Returning::Rows(st) => self.fetch(st).await,
            Returning::ReadBack {
                write,
                read,
                together: false,
            } => {
                self.run(write).await?;
                self.fetch(read).await
            }
            Returning::ReadBack { write, read, .. } => {
                self.retry(|| async {
                    let txn = self.begin_immediate().await?;
                    self.count(2);
                    txn.execute_raw(write.clone()).await?;
                    let rows = txn.query_all_raw(read.clone()).await?;
                    self.commit(txn).await?;
                    Ok(rows)
                })
                .await
            }
        }
    }

    /// The rows `r` changed, written and read in `txn`.
    pub(super) async fn returning_in(
        &self,
        txn: &DatabaseTransaction,
        r: Returning,
    ) -> Result<Vec<QueryResult>> {
        match r {
            Returning::Rows(st) => Ok(self.bounded(txn.query_all_raw(st)).await?),
            Returning::ReadBack { write, read, .. } => {
                self.bounded(txn.execute_raw(write)).await?;
                Ok(self.bounded(txn.query_all_raw(read)).await?)
            }
        }
    }
}

/// The `id` and `version` of each row.
pub(crate) fn id_versions(rows: &[QueryResult]) -> Result<Vec<(PartitionId, i64)>> {
    rows.iter()
        .map(|r| Ok((get(r, "id")?, get(r, "version")?)))
        .collect()
}
