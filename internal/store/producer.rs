//! What producers hand the store (partitions' settings, items, retry
//! scopes) and what they get back; retrying failed items. Enqueueing
//! is in `enqueue`.

use crate::ids::Tenant;
use crate::schedule::Schedule;
use std::time::Duration;

use sea_orm::ConnectionTrait;

use super::driver::Sql;

use super::Store;
use crate::Result;

/// What to do with a partition when one of its items fails for good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum OnFailure {
    /// The partition becomes `failed`; fan-in cannot pass a failed item.
    #[default]
    Block,
    /// Failed items count as finished; the partition goes on.
    Continue,
}

impl OnFailure {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Block => "block",
            OnFailure::Continue => "continue",
        }
    }

    /// Reads the stored text; anything but `continue` blocks, the safe choice.
    pub fn from_stored(text: &str) -> Self {
        if text == "continue" {
            OnFailure::Continue
        } else {
            OnFailure::Block
        }
    }
}

/// Which failed items [`Store::retry_failed`] puts back.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum RetryScope<'a> {
    /// Every failed item.
    All,
    /// The failed items of one partition.
    Partition(&'a str),
    /// One item (if it is failed): item `id` of `partition`.
    Item {
        /// Its partition.
        partition: &'a str,
        /// The item's id within it.
        id: &'a str,
    },
}

/// What [`Store::retry_failed`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retried {
    /// Items put back to available with fresh attempts.
    pub items: u64,
    /// Of those, items moved up to their partition's current gate because
    /// the gate had moved on (`on_failure = continue`).
    pub moved: u64,
}

/// Settings of a partition created by [`Store::enqueue`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PartitionSpec {
    /// Close when nothing is left (default true).
    pub auto_close: bool,
    /// Never advance the gate automatically (default false).
    pub manual_checkpoint: bool,
    /// Default `block`.
    pub on_failure: OnFailure,
    /// Write a `partition.gate` event each time the gate moves (default
    /// false; closes, failures and cancellations always write one).
    pub gate_events: bool,
    /// The tenant it belongs to, for fairness and per-tenant limits
    /// (None: it counts as its own).
    pub tenant: Option<Tenant>,
    /// Its share of dispatch (None: 1, an even share).
    pub weight: Option<u32>,
    /// Its own cap on items in flight (None: `--max-in-flight-per-partition`).
    pub max_in_flight: Option<u32>,
    /// Served before the lower ones it shares turns with (its tenant's,
    /// or those of no tenant); -1000 to 1000, 0 by default.
    pub priority: i32,
}

impl Default for PartitionSpec {
    fn default() -> Self {
        Self {
            auto_close: true,
            manual_checkpoint: false,
            on_failure: OnFailure::Block,
            gate_events: false,
            tenant: None,
            weight: None,
            max_in_flight: None,
            priority: 0,
        }
    }
}

/// One item to add.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NewItem {
    /// Item id; None = a new UUID.
    pub id: Option<String>,
    /// Gate; None = the partition's current gate.
    pub gate: Option<i64>,
    /// Bytes forwarded to the handler unchanged (normally JSON).
    pub data: bytes::Bytes,
    /// When it may first run; None = as soon as its gate is reached.
    pub schedule: Option<Schedule>,
    /// The producer's W3C `traceparent`: the delivery's span is its child.
    pub traceparent: Option<String>,
    /// The id was generated for the item (a random UUID after the token's
    /// prefix), not given: it cannot aim at another tenant's prefix.
    pub(crate) generated: bool,
    /// The item whose answer spawned it (`parent_id`).
    pub(crate) parent: Option<String>,
}

impl NewItem {
    /// An item of `data` with a new UUID as its id, at the partition's gate.
    pub fn new(data: impl Into<bytes::Bytes>) -> Self {
        Self {
            id: None,
            gate: None,
            data: data.into(),
            schedule: None,
            traceparent: None,
            generated: false,
            parent: None,
        }
    }

    /// The same item with its own id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The same item with `id` generated for it (see [`NewItem::generated`]).
    pub(crate) fn with_generated_id(mut self, id: String) -> Self {
        self.id = Some(id);
        self.generated = true;
        self
    }

    /// The same item at `gate` (not below the partition's current gate).
    pub fn at_gate(mut self, gate: i64) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The same item, not sent before `epoch_ms` (epoch milliseconds).
    pub fn not_before(mut self, epoch_ms: i64) -> Self {
        self.schedule = Some(Schedule::At(epoch_ms));
        self
    }

    /// The same item, not sent before `delay` has passed since it is
    /// written, by the database's clock.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.schedule = Some(Schedule::After(delay));
        self
    }

    /// The same item in the producer's trace: `traceparent` is a W3C
    /// Trace Context header value (checked by [`crate::validate::traceparent`]).
    pub fn in_trace(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }
}

/// What [`Store::enqueue`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// Items inserted.
    pub items: usize,
    /// The partition did not exist.
    pub created: bool,
    /// The partition was `complete` and is `available` again.
    pub reopened: bool,
    /// The partition is `failed`: the items were written and wait, with
    /// the rest of it, until its failed items are retried
    /// ([`Store::retry_failed`], `processor retry`).
    pub failed: bool,
}

impl Store {
    /// Puts failed items back to `available` with attempts reset, and
    /// reopens their partitions, bumping every touched partition's version
    /// so that a holder re-checks it and no advance or close computed
    /// before this can pass. An item whose partition's gate has moved on
    /// (`on_failure = continue`) runs again at the partition's current
    /// gate. `last_error` is kept as history until the next attempt.
    ///
    /// ```no_run
    /// # async fn f(store: feed::Store) -> feed::Result<()> {
    /// use feed::store::RetryScope;
    /// let r = store.retry_failed(RetryScope::Partition("folder-1")).await?;
    /// println!("{} items will run again", r.items);
    /// # Ok(()) }
    /// ```
    pub async fn retry_failed(&self, scope: RetryScope<'_>) -> Result<Retried> {
        let b = self.driver;
        let txn = self.begin_write().await?;
        // Which failed items: of the scope, not of cancelled partitions
        // (their items stay as they are).
        let scoped = |s: &mut Sql| {
            match scope {
                RetryScope::All => {}
                RetryScope::Partition(p) => {
                    s.push(" AND partition_id = ").bind(p);
                }
                RetryScope::Item { partition, id } => {
                    s.push(" AND partition_id = ")
                        .bind(partition)
                        .push(" AND id = ")
                        .bind(id);
                }
            }
            s.push(
                " AND partition_id NOT IN (SELECT c.id FROM feed_partitions c WHERE c.status = 'cancelled')",
            );
        };
        let statement = |head: &str, tail: &str| {
            let mut s = Sql::new(b);
            s.push(head);
            scoped(&mut s);
            s.push(tail);
            s.statement()
        };
        // Partitions first, then items: the lock order of every writer.
        self.bounded(txn.execute_raw(statement(
            "UPDATE feed_partitions SET status = 'available', version = version + 1, updated_at = {now} \
             WHERE status <> 'cancelled' AND id IN (SELECT partition_id FROM feed_items WHERE status = 'failed'",
            ")",
        )))
        .await?;
        let gate = "(SELECT p.gate FROM feed_partitions p WHERE p.id = feed_items.partition_id)";
        let note = b.concat(&[
            "'moved up from gate '",
            "gate",
            "' to its partition''s current gate by retry; previous error: '",
            "COALESCE(last_error, '')",
        ]);
        // `last_error` first: MySQL's later assignments see earlier ones.
        let moved = self
            .bounded(txn.execute_raw(statement(
                &format!(
                    "UPDATE feed_items SET last_error = {note}, gate = {gate} \
                     WHERE status = 'failed' AND gate < {gate}"
                ),
                "",
            )))
            .await?
            .rows_affected();
        let n = self
            .bounded(txn.execute_raw(statement(
                "UPDATE feed_items SET status = 'available', attempts = 0, steps = 0, not_before = NULL, \
                 version = version + 1, updated_at = {now} WHERE status = 'failed'",
                "",
            )))
            .await?
            .rows_affected();
        if n > 0 {
            self.bounded(super::insert::wake(&txn, b)).await?;
        }
        self.bounded(self.commit(txn)).await?;
        Ok(Retried { items: n, moved })
    }
}
