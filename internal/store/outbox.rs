//! Writing completion events: the rows of `feed_events` that a partition's
//! close, failure, cancellation or gate move (with `gate_events`) adds, in
//! the transaction of the change itself, so an event is neither lost nor
//! written for a change that did not commit. Feed's statements write them,
//! not a trigger: a distributed database (Citus) runs no trigger on its
//! distributed tables. On PostgreSQL the same transaction sends `NOTIFY
//! feed_events` with each partition's id, which wakes `processor wait`.

use sea_orm::{ConnectionTrait, DatabaseTransaction, Value};

use super::driver::{Driver, Sql};
use super::{Store, get};
use crate::Result;
use crate::ids::PartitionId;
use crate::status::Status;

/// What happened to the partitions an event is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Happened {
    /// The partition ended with this status (`complete`, `failed`,
    /// `cancelled`): event `partition.<status>`.
    Ended(Status),
    /// Its gate moved: event `partition.gate`, for partitions with
    /// `gate_events` only.
    Gate,
}

impl Store {
    /// Writes in `txn` one event for each of `ids` (whose change `txn`
    /// has written), with its gate and its items' counts by status as
    /// they stand in `txn`; returns how many were written.
    pub(crate) async fn record_events(
        &self,
        txn: &DatabaseTransaction,
        happened: Happened,
        ids: &[PartitionId],
    ) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let b = self.driver;
        let count = |s: &str| format!("COUNT(CASE WHEN i.status = '{s}' THEN 1 END)");
        let (kind, only) = match happened {
            Happened::Ended(status) => (format!("'partition.{}'", status.as_str()), ""),
            Happened::Gate => ("'partition.gate'".into(), " AND p.gate_events"),
        };
        // One row per partition, items or none: a LEFT JOIN grouped by the
        // partition, which a distributed database runs on the machine that
        // holds it.
        let select = |s: &mut Sql| {
            s.push(&format!(
                "SELECT p.id, {kind} AS kind, p.gate, {} AS a, {} AS c, {} AS f, {} AS x \
                 FROM feed_partitions p LEFT JOIN feed_items i ON i.partition_id = p.id WHERE p.id IN (",
                count("available"),
                count("complete"),
                count("failed"),
                count("cancelled"),
            ))
            .binds(ids.iter().map(Value::from))
            .push(&format!("){only} GROUP BY p.id, p.gate"));
        };
        let mut s = Sql::new(b);
        s.push(
            "INSERT INTO feed_events (partition_id, kind, gate, items_available, \
             items_complete, items_failed, items_cancelled) ",
        );
        if *b == Driver::Citus {
            // Citus runs an `INSERT … SELECT` that fills the events' id
            // sequence through the coordinator: the read, then the rows
            // as values, each statement routed to the partition's worker.
            let mut read = Sql::new(b);
            select(&mut read);
            let rows = self.bounded(txn.query_all_raw(read.statement())).await?;
            if rows.is_empty() {
                return Ok(0);
            }
            let mut values = Vec::with_capacity(rows.len() * 7);
            for r in &rows {
                values.push(Value::from(get::<String>(r, "id")?));
                values.push(Value::from(get::<String>(r, "kind")?));
                for c in ["gate", "a", "c", "f", "x"] {
                    values.push(Value::from(get::<i64>(r, c)?));
                }
            }
            s.push("VALUES ").rows(rows.len(), values);
        } else {
            select(&mut s);
        }
        let written = self
            .bounded(txn.execute_raw(s.statement()))
            .await?
            .rows_affected();
        if written > 0 && b.has_listen() {
            // From the ids themselves, not a table: a notification sent
            // from a worker of a distributed database would reach no one.
            let mut n = Sql::new(b);
            n.push("SELECT pg_notify('feed_events', v.id) FROM (VALUES ");
            for (k, id) in ids.iter().enumerate() {
                n.push(if k == 0 { "(" } else { ", (" })
                    .bind(id.as_str())
                    .push("::text)");
            }
            n.push(") AS v(id)");
            self.bounded(txn.query_all_raw(n.statement())).await?;
        }
        Ok(written)
    }
}
