//! Operator controls: pause, resume, cancel, checkpoint and checked retries.
//!
//! Each control is one conditional write, so it is safe against processors
//! and other operators acting at the same moment; only when it changes
//! nothing is the row read again, to say why (not found, or a conflict).
//! Pausing sets `paused` and keeps status `available`: the partition keeps
//! its lease and items, and dispatch skips it. Cancelling sets status
//! `cancelled` and `owner = NULL` so that late results fail the fence.

use super::driver::{Sql, sql};
use sea_orm::{ConnectionTrait, FromQueryResult};

use super::outbox::Happened;
use super::{Retried, RetryScope, Store, get};
use crate::status::Status;
use crate::{Error, Result, validate};

/// A partition's settings and state, as read to explain a refused control.
#[derive(Clone, Debug, FromQueryResult)]
pub(super) struct State {
    pub(super) status: String,
    gate: i64,
    manual_checkpoint: bool,
}

impl Store {
    /// A partition's status and settings; NotFound for an unknown one.
    pub(super) async fn state(&self, id: &str) -> Result<State> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT status, gate, manual_checkpoint FROM feed_partitions WHERE id = " {id}
            ))
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| Error::NotFound(format!("partition {id}")))?;
        Ok(State::from_query_result(r, "")?)
    }

    /// Wakes PostgreSQL listeners after a control that makes work runnable.
    async fn wake(&self) -> Result<()> {
        if let Some(notify) = self.driver.dialect().notify {
            self.run(sql!(self.driver; [notify])).await?;
        }
        Ok(())
    }

    async fn set_paused(&self, id: Option<&str>, paused: bool) -> Result<u64> {
        // Pausing applies to partitions that may still run; resuming to any
        // paused one that is not cancelled.
        let applies = if paused {
            "status IN ('available', 'failed')"
        } else {
            "paused AND status <> 'cancelled'"
        };
        let mut st = Sql::new(self.driver);
        st.push("UPDATE feed_partitions SET paused = ")
            .bind(paused)
            .push(", version = version + 1, updated_at = {now} WHERE ")
            .push(applies);
        if let Some(id) = id {
            st.push(" AND id = ").bind(id);
        }
        let n = self.run(st.statement()).await?;
        if !paused && n > 0 {
            self.wake().await?;
        }
        Ok(n)
    }

    /// Pauses a partition: nothing new is dispatched until [`Store::resume`];
    /// calls in flight finish and their results are written. Idempotent.
    pub async fn pause(&self, id: &str) -> Result<()> {
        validate::filter("partition id", id)?;
        if self.set_paused(Some(id), true).await? == 0 {
            let s = self.state(id).await?;
            return Err(Error::Conflict(format!(
                "partition {id} is {}: there is nothing left to pause",
                s.status
            )));
        }
        Ok(())
    }

    /// Resumes a paused partition where it stopped. Idempotent.
    pub async fn resume(&self, id: &str) -> Result<()> {
        validate::filter("partition id", id)?;
        if self.set_paused(Some(id), false).await? == 0 {
            let s = self.state(id).await?;
            if s.status == "cancelled" {
                return Err(Error::Conflict(format!(
                    "partition {id} is cancelled; it cannot be resumed"
                )));
            }
        }
        Ok(())
    }

    /// Sets a partition's priority (see [`PartitionSpec::priority`]); its
    /// holder serves it by the new one from its next acquire cycle.
    ///
    /// [`PartitionSpec::priority`]: super::PartitionSpec::priority
    pub async fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        validate::filter("partition id", id)?;
        validate::priority(priority)?;
        let n = self
            .run(sql!(self.driver;
                "UPDATE feed_partitions SET priority = " {priority} ", version = version + 1, \
                 updated_at = {now} WHERE id = " {id}
            ))
            .await?;
        if n == 0 {
            return Err(Error::NotFound(format!("partition {id}")));
        }
        Ok(())
    }

    /// Pauses every `available` or `failed` partition (the stop-all switch);
    /// returns how many were paused now.
    pub async fn pause_all(&self) -> Result<u64> {
        self.set_paused(None, true).await
    }

    /// Resumes every paused partition; returns how many.
    pub async fn resume_all(&self) -> Result<u64> {
        self.set_paused(None, false).await
    }

    /// Cancels a partition: it and its available items become `cancelled`
    /// and it is released, so results arriving afterwards are rejected.
    /// Idempotent; a `complete` partition is refused. Returns the number of
    /// items cancelled now.
    ///
    /// The partition row is locked first (the lock order of every writer),
    /// then the items are cancelled, then the partition: its completion
    /// event, written by the last statement, counts the items as cancelled.
    pub async fn cancel(&self, id: &str) -> Result<u64> {
        validate::filter("partition id", id)?;
        let b = self.driver;
        let txn = self.begin_write().await?;
        let rows = self
            .bounded(txn.query_all_raw(sql!(b;
                "SELECT status FROM feed_partitions WHERE id = " {id} [b.dialect().for_update]
            )))
            .await?;
        let Some(row) = rows.first() else {
            self.bounded(txn.rollback()).await?;
            return Err(Error::NotFound(format!("partition {id}")));
        };
        let status: String = get(row, "status")?;
        if status == "complete" {
            self.bounded(txn.rollback()).await?;
            return Err(Error::Conflict(format!(
                "partition {id} is {status}: there is nothing left to cancel"
            )));
        }
        let items = self
            .bounded(txn.execute_raw(sql!(b;
                "UPDATE feed_items SET status = 'cancelled', version = version + 1, updated_at = {now} \
                 WHERE partition_id = " {id} " AND status = 'available'"
            )))
            .await?
            .rows_affected();
        self.bounded(txn.execute_raw(sql!(b;
            "UPDATE feed_partitions SET status = 'cancelled', owner = NULL, version = version + 1, \
             updated_at = {now} WHERE id = " {id}
        )))
        .await?;
        let ended = Happened::Ended(Status::Cancelled);
        self.record_events(&txn, ended, &[id.into()]).await?;
        self.bounded(self.commit(txn)).await?;
        self.count(4);
        Ok(items)
    }

    /// Advances a `manual_checkpoint` partition to `gate`. Refused when the
    /// partition is not manual, not `available`, `gate` is not above its
    /// current gate, or items below `gate` are still available (they could
    /// never run afterwards).
    pub async fn checkpoint(&self, id: &str, gate: i64) -> Result<()> {
        validate::filter("partition id", id)?;
        validate::gate("checkpoint gate", gate)?;
        let txn = self.begin_write().await?;
        let n = self
            .bounded(txn.execute_raw(sql!(self.driver;
                "UPDATE feed_partitions SET gate = " {gate} ", gate_at = {now}, version = version + 1, updated_at = {now} \
                 WHERE id = " {id} " AND manual_checkpoint AND status = 'available' AND gate < " {gate} " \
                 AND NOT EXISTS (SELECT 1 FROM feed_items i \
                 WHERE i.partition_id = " {id} " AND i.status = 'available' AND i.gate < " {gate} ")"
            )))
            .await?
            .rows_affected();
        if n == 1 {
            self.record_events(&txn, Happened::Gate, &[id.into()])
                .await?;
        }
        self.bounded(self.commit(txn)).await?;
        if n == 1 {
            return self.wake().await;
        }
        let s = self.state(id).await?;
        let why = if !s.manual_checkpoint {
            format!(
                "partition {id} is not a manual_checkpoint partition; its gate advances by itself"
            )
        } else if s.status != "available" {
            format!(
                "partition {id} is {}; only an available partition can be advanced",
                s.status
            )
        } else if gate <= s.gate {
            format!(
                "gate {gate} is not above partition {id}'s current gate {}",
                s.gate
            )
        } else {
            format!(
                "partition {id} still has available items below gate {gate}; \
                 they would never run. Let them finish (or cancel the partition) first"
            )
        };
        Err(Error::Conflict(why))
    }

    /// Retries the failed items of one partition; refused for a cancelled
    /// partition. Returns the number of items reset (possibly 0).
    pub async fn retry_partition(&self, id: &str) -> Result<Retried> {
        validate::filter("partition id", id)?;
        let s = self.state(id).await?;
        if s.status == "cancelled" {
            return Err(Error::Conflict(format!(
                "partition {id} is cancelled; its items cannot be retried"
            )));
        }
        self.retry_failed(RetryScope::Partition(id)).await
    }

    /// Retries one failed item (see [`Store::retry_failed`]), saying why when
    /// it does not apply: unknown item, not `failed`, or cancelled
    /// partition. The item is `id` of `partition`, or of the one partition
    /// with an item by that id (see [`Store::locate`]).
    pub async fn retry_one(&self, partition: Option<&str>, id: &str) -> Result<Retried> {
        let partition = self.locate(partition, id).await?;
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT i.status AS status, p.status AS pstatus FROM feed_items i \
                     JOIN feed_partitions p ON p.id = i.partition_id WHERE i.partition_id = " {partition.as_str()}
                     " AND i.id = " {id}
            ))
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| Error::NotFound(format!("item {id}")))?;
        let (status, pstatus): (String, String) = (get(r, "status")?, get(r, "pstatus")?);
        if pstatus == "cancelled" {
            return Err(Error::Conflict(format!(
                "item {id}'s partition is cancelled; it cannot be retried"
            )));
        }
        let r = self
            .retry_failed(RetryScope::Item {
                partition: &partition,
                id,
            })
            .await?;
        if r.items == 0 {
            return Err(Error::Conflict(format!(
                "item {id} is {status}, not failed; only failed items are retried"
            )));
        }
        Ok(r)
    }
}
