//! Enqueueing: a partition created or extended and its items inserted,
//! in one transaction.

use std::time::Duration;

use sea_orm::{ConnectionTrait, Statement};

use super::driver::{Clocked, is_transient, sql};
use super::insert::{insert_items, statements, wake};
use super::producer::{Enqueued, NewItem, PartitionSpec};
use super::{ProducerScope, Store, get};
use crate::backoff::Backoff;
use crate::{Error, Result, validate};

impl Store {
    /// Creates or extends a partition and inserts `items`, all in one
    /// transaction: on any error nothing is written. Items below the
    /// partition's current gate are refused (they could never run), and so
    /// is a `cancelled` partition ([`Error::Conflict`]); adding to a
    /// `complete` partition reopens it, adding to a `failed` one leaves it
    /// failed (see [`Enqueued::failed`]). An item's `traceparent` must be
    /// W3C Trace Context's ([`crate::validate::traceparent`]; a later version's
    /// extra fields are dropped). `spec` applies when the partition is
    /// created. On SQLite the transaction holds the database's one write
    /// lock: keep a call to about 10,000 items so that dispatch is not held
    /// up for long.
    ///
    /// ```no_run
    /// # async fn f() -> feed::Result<()> {
    /// use feed::store::{NewItem, PartitionSpec};
    /// let store = feed::Store::connect("sqlite://feed.db?mode=rwc", 4).await?;
    /// store.migrate().await?;
    /// let items = vec![NewItem::new(br#"{"resume": 1}"#.to_vec())];
    /// store.enqueue("folder-1", &PartitionSpec::default(), items).await?;
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(
        &self,
        partition: &str,
        spec: &PartitionSpec,
        items: Vec<NewItem>,
    ) -> Result<Enqueued> {
        self.enqueue_as(partition, spec, items, None).await
    }

    /// [`Store::enqueue`] on behalf of a producer token: what its `scope`
    /// does not allow is refused with [`Error::Forbidden`] (another
    /// tenant, a partition of another tenant, an id outside its prefix, a
    /// partition it would create or an item id it gives that starts with
    /// another tenant's token's prefix, a weight or max in flight above its
    /// caps), and a partition it creates belongs to its tenant. A scope read
    /// from `feed_producer_tokens` ([`Store::producer_scope`]) whose token
    /// has been revoked since is refused with [`Error::Unauthorized`]: the
    /// check is in the transaction of the writes, and a revoke waits for it,
    /// so no enqueue of the token commits after a revoke has returned. None
    /// is the library's own, unscoped, enqueue.
    pub async fn enqueue_as(
        &self,
        partition: &str,
        spec: &PartitionSpec,
        mut items: Vec<NewItem>,
        scope: Option<&ProducerScope>,
    ) -> Result<Enqueued> {
        validate::id("partition id", partition)?;
        let mut spec = spec.clone();
        if let Some(scope) = scope {
            scope.admit(partition, &mut spec, &items)?;
        }
        if let Some(t) = &spec.tenant {
            validate::id("tenant", t)?;
        }
        validate::priority(spec.priority)?;
        for item in &mut items {
            if let Some(id) = &item.id {
                validate::id("item id", id)?;
            }
            if let Some(g) = item.gate {
                validate::gate("item gate", g)?;
            }
            if let Some(schedule) = item.schedule {
                crate::schedule::check(item.id.as_deref(), schedule)?;
            }
            if let Some(trace) = &item.traceparent {
                let trace = crate::validate::traceparent(trace).map_err(|e| match &item.id {
                    Some(id) => Error::Invalid(format!("item {:?}: {e}", validate::shown(id))),
                    None => Error::Invalid(e),
                })?;
                item.traceparent = Some(trace);
            }
        }
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(2));
        for attempt in 1.. {
            match self.enqueue_once(partition, &spec, &items, scope).await {
                Err(Error::Db(e)) if attempt < 8 && is_transient(&e) => backoff.wait().await,
                other => return other,
            }
        }
        unreachable!("the loop returns")
    }

    async fn enqueue_once(
        &self,
        partition: &str,
        spec: &PartitionSpec,
        items: &[NewItem],
        scope: Option<&ProducerScope>,
    ) -> Result<Enqueued> {
        let b = self.driver;
        let txn = self.begin_write().await?;
        // Upsert, then lock: producers creating the same partition at once
        // all succeed (a lock on a row that does not exist yet locks nothing).
        let created = self
            .bounded(txn.execute_raw(insert_partition(b, partition, spec)))
            .await?
            .rows_affected()
            == 1;
        let rows = self
            .bounded(txn.query_all_raw(sql!(b;
                "SELECT gate, status, tenant FROM feed_partitions WHERE id = " {partition} [b.dialect().for_update]
            )))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::NotFound(format!("partition {partition}")))?;
        let (gate, status) = (get::<i64>(row, "gate")?, get::<String>(row, "status")?);
        // The token's own checks come after the partition's lock, so that
        // a revoke waits only for the writes that follow.
        if let Some(scope) = scope {
            let created = created.then_some(partition);
            self.hold_scope(&txn, scope, created, items).await?;
        }
        if let Some(scope) = scope
            && get::<Option<String>>(row, "tenant")?.as_deref() != scope.tenant()
        {
            let whose = match scope.tenant() {
                Some(t) => format!("tenant {t:?}'s"),
                None => "of no tenant".into(),
            };
            return Err(Error::Forbidden(format!(
                "producer token {}: partition {partition} exists and is not {whose}; \
                 nothing was written",
                scope.id
            )));
        }
        if status == "cancelled" {
            return Err(Error::Conflict(format!(
                "partition {partition} is cancelled: nothing of it runs again, so nothing was \
                 written; enqueue into another partition"
            )));
        }
        for (n, item) in items.iter().enumerate() {
            if let Some(g) = item.gate
                && g < gate
            {
                let id = item.id.clone().unwrap_or_else(|| format!("#{}", n + 1));
                return Err(Error::Invalid(format!(
                    "item {id} has gate {g}, below partition {partition}'s current gate {gate}: it could never run. \
                     Give it gate {gate} or higher (or omit the gate to use the current one)"
                )));
            }
        }
        // Bumping the version makes a holder re-check the partition's gate,
        // and makes any advance or close it computed before this fail.
        self.bounded(txn.execute_raw(sql!(b;
            "UPDATE feed_partitions SET status = CASE WHEN status = 'complete' THEN 'available' ELSE status END, \
             version = version + 1, updated_at = {now} WHERE id = " {partition}
        )))
        .await?;
        for chunk in statements(items) {
            self.bounded(insert_items(&txn, b, partition, gate, chunk))
                .await?;
        }
        if !items.is_empty() {
            self.bounded(wake(&txn, b)).await?;
        }
        self.bounded(self.commit(txn)).await?;
        Ok(Enqueued {
            items: items.len(),
            created,
            reopened: status == "complete",
            failed: status == "failed",
        })
    }
}

/// The statement that creates partition `id` with `spec`, or leaves the
/// one there as it is (then it affects no row).
pub(super) fn insert_partition(b: Clocked, id: &str, spec: &PartitionSpec) -> Statement {
    sql!(b;
        "INSERT INTO feed_partitions (id, auto_close, manual_checkpoint, on_failure, gate_events, \
         tenant, weight, max_in_flight, priority) VALUES (" {id} ", " {spec.auto_close} ", "
        {spec.manual_checkpoint} ", " {spec.on_failure.as_str()} ", " {spec.gate_events} ", "
        {spec.tenant.as_deref()} ", " {spec.weight.map(|w| i32::try_from(w).unwrap_or(i32::MAX))} ", "
        {spec.max_in_flight.map(|m| i32::try_from(m).unwrap_or(i32::MAX))} ", " {spec.priority} ")" [b.dialect().keep_existing]
    )
}
