//! Dispatch queries: which partitions got new items, and the next ready
//! items of held partitions, in the order they were written.
//!
//! Fairness comes from asking per partition: each refill names the
//! partitions it serves (in turn, see `rotation`) and how many items each
//! may contribute, so a partition of a million items takes no more of a
//! refill than one of ten.

use sea_orm::Value;

use super::driver::{NOW_BOUND, Sql, sql};
use super::unreadable::{Unreadable, describe, ready_item};
use super::{Store, get};
use crate::Result;
use crate::ids::{ItemId, ItemKey, PartitionId, SessionId};

/// An item ready to be sent to the handler.
#[derive(Clone, Debug)]
pub(crate) struct ReadyItem {
    /// What a result write is fenced with.
    pub fence: Fence,
    /// The bytes forwarded to the handler.
    pub data: Vec<u8>,
    /// Its place in write order, so the next read can start after it.
    pub seq: i64,
    /// It was scheduled (`not_before` set) and its time has come: it was
    /// read by due time, not after the partition's floor.
    pub scheduled: bool,
    /// The producer's W3C trace context, if it gave one.
    pub traceparent: Option<String>,
    /// How long it had been ready when read (database clock): since it
    /// was written, its time came or its gate opened, whichever was last.
    /// None when a column of the row could not be read as a time.
    pub waited: Option<std::time::Duration>,
    /// When it was read, so the time it then spends in the buffer counts.
    pub read: std::time::Instant,
}

/// What one refill asks of a partition: its first `n` ready items
/// without a time, only those written after `after` when set (the items
/// before it are known to the caller already: reading them again is the
/// refill's main cost), and its first `due` scheduled items whose time has
/// come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    pub partition: PartitionId,
    pub n: usize,
    pub after: Option<i64>,
    pub due: usize,
}

impl From<(PartitionId, usize)> for Ask {
    fn from((partition, n): (PartitionId, usize)) -> Ask {
        Ask {
            partition,
            n,
            after: None,
            due: n,
        }
    }
}

/// An item as it was delivered: its result is written only if its version
/// and attempts are unchanged and its partition is still held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// Item id.
    pub id: ItemId,
    /// Its partition.
    pub partition_id: PartitionId,
    /// The item's gate, equal to its partition's gate when fetched.
    pub gate: i64,
    /// OCC version when fetched.
    pub version: i64,
    /// Calls already made for the current step.
    pub attempts: i32,
    /// Steps already taken at this gate ("not done" answers in a row).
    pub steps: i32,
}

impl Fence {
    /// The item's key: its partition and id.
    pub fn key(&self) -> ItemKey {
        ItemKey {
            partition: self.partition_id.clone(),
            id: self.id.clone(),
        }
    }

    /// The step's `Idempotency-Key`, `<partition>/<item>:<version>`: the
    /// same for every attempt of one step, new for the next, and one to
    /// one with the step (item ids are unique only within a partition, so
    /// the partition is in it, its `%` and `/` percent-encoded).
    pub fn idempotency_key(&self) -> String {
        let partition = self.partition_id.replace('%', "%25").replace('/', "%2F");
        format!("{partition}/{}:{}", self.id, self.version)
    }
}

impl Store {
    /// The partitions of up to `limit` items written after `after` (by
    /// write order), oldest first, with the last position read: a look at
    /// new work that reads only the rows written since the last look. With
    /// no position yet it only reads the current end (one index probe).
    /// Where the write-order index holds available items only, so does
    /// the look: the rest is no work.
    pub(crate) async fn written_since(
        &self,
        after: Option<i64>,
        limit: usize,
    ) -> Result<(Vec<PartitionId>, i64)> {
        let seq = self.driver.dialect().seq;
        let work = self.driver.dialect().new_work;
        let only = |word: &str| work.map_or(String::new(), |c| format!(" {word} {c}"));
        let Some(after) = after else {
            let rows = self
                .fetch(sql!(self.driver; [&format!("SELECT MAX({seq}) AS s FROM feed_items{}", only("WHERE"))]))
                .await?;
            let end: Option<i64> = rows.first().map(|r| get(r, "s")).transpose()?.flatten();
            return Ok((vec![], end.unwrap_or(0)));
        };
        let rows = self
            .fetch(sql!(self.driver;
                [&format!("SELECT partition_id, {seq} AS s FROM feed_items WHERE {seq} > ")] {after}
                [&only("AND")] [&format!(" ORDER BY {seq} LIMIT ")] {limit as i64}
            ))
            .await?;
        let mut end = after;
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            end = end.max(get(r, "s")?);
            match get(r, "partition_id") {
                Ok(p) => ids.push(p),
                Err(_) => passed_over(&describe(r, "partition_id")),
            }
        }
        Ok((ids, end))
    }

    /// A ready row that cannot be read: its item is failed with a message
    /// when its id can be read, else it is passed over; either way logged,
    /// and the rest of the read goes on.
    async fn unreadable(&self, me: &SessionId, bad: &Unreadable) {
        let Some((id, partition)) = &bad.target else {
            return passed_over(&bad.why);
        };
        let item = describe_value(id);
        match self.fail_unreadable(me, bad).await {
            Ok(failed) => tracing::warn!(
                %partition, %item, error = %bad.why, failed,
                "an item's row cannot be read; it is failed: fix it with SQL and run `processor retry`"
            ),
            Err(e) => tracing::warn!(
                %partition, %item, error = %bad.why, write_error = %e,
                "an item's row cannot be read, nor could it be failed; it is passed over"
            ),
        }
    }

    /// The first ready items of each partition asked, for partitions `me`
    /// holds, in write order: one statement for all of them (on Citus one
    /// per partition). Each partition is read in two ranges of the
    /// dispatch index, so items scheduled for later are never read: those
    /// without a time in write order (after the ask's floor), and those
    /// whose time has come in the order they came due.
    pub(crate) async fn ready_items(&self, me: &SessionId, want: &[Ask]) -> Result<Vec<ReadyItem>> {
        if want.is_empty() {
            return Ok(vec![]);
        }
        let mut items = self.per_partition(want, |w| self.ready_in(me, w)).await?;
        // Items due now run in write order, whichever range they came from.
        items.sort_by_key(|i| i.seq);
        Ok(items)
    }

    /// The ready items of the partitions asked, in one statement.
    async fn ready_in(&self, me: &SessionId, want: &[Ask]) -> Result<Vec<ReadyItem>> {
        // Padded to a power of two with branches that match nothing, so the
        // statement is prepared once per size class. The partition's gate
        // comes from a scalar subquery rather than a join: joined, MariaDB
        // sorts all of a partition's ready items instead of reading the
        // first few in index order (a filesort per refill).
        let n = want.len().next_power_of_two();
        let d = self.driver;
        let (data, seq, index) = (d.data_column("i"), d.dialect().seq, d.dialect().ready_index);
        let head = format!(
            "SELECT i.id, i.partition_id, i.gate, {data} AS data, i.attempts, \
             i.version, i.steps, i.{seq} AS seq, i.not_before, i.traceparent, i.updated_at, \
             {{now}} AS read_at, (SELECT g.gate_at FROM feed_partitions g WHERE g.id = "
        );
        let from = format!(") AS gate_at FROM feed_items i{index} WHERE i.partition_id = ");
        // One branch: the partition's available items of its gate in
        // `range` (which binds its own values), ordered, at most `limit`.
        let branch = |s: &mut Sql,
                      partition: &Value,
                      range: &dyn Fn(&mut Sql),
                      order: &str,
                      limit: i64| {
            sql!(into s;
                [&head] {partition.clone()} [&from] {partition.clone()} " AND i.status = 'available' \
                 AND i.gate = (SELECT p.gate FROM feed_partitions p WHERE p.id = "
                {partition.clone()} " AND p.owner = " {me}
                " AND p.status = 'available' AND NOT p.paused) AND "
            );
            range(s);
            sql!(into s; " ORDER BY " [order] " LIMIT " {limit});
        };
        let (now_order, due_order) = (
            d.unscheduled_order("i", false),
            format!("i.not_before, i.{seq}"),
        );
        let (now_range, due_range) = (
            format!("i.not_before IS NULL AND i.{seq} > "),
            format!("i.not_before <= {NOW_BOUND}"),
        );
        let mut s = Sql::new(d);
        for b in 0..n {
            let (partition, after, asked, due) = match want.get(b) {
                Some(ask) => (
                    Value::from(&ask.partition),
                    ask.after.unwrap_or(i64::MIN),
                    ask.n,
                    ask.due,
                ),
                None => (Value::String(None), i64::MIN, 0, 0),
            };
            if b > 0 {
                s.push(" UNION ALL ");
            }
            d.limited_branch(&mut s, 2 * b, &|s| {
                let range = |s: &mut Sql| {
                    s.push(&now_range).bind(after);
                };
                branch(s, &partition, &range, &now_order, asked as i64);
            });
            s.push(" UNION ALL ");
            d.limited_branch(&mut s, 2 * b + 1, &|s| {
                branch(
                    s,
                    &partition,
                    &|s: &mut Sql| {
                        s.push(&due_range);
                    },
                    &due_order,
                    due as i64,
                );
            });
        }
        let rows = self.fetch_planned_once(s.statement()).await?;
        let mut items = Vec::with_capacity(rows.len());
        for r in &rows {
            match ready_item(r) {
                Ok(item) => items.push(item),
                Err(bad) => self.unreadable(me, &bad).await,
            }
        }
        Ok(items)
    }
}

/// Logs, at a bounded rate, a row passed over because not even its
/// partition or id can be read.
fn passed_over(why: &str) {
    static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
    if let Some(n) = LOG.due() {
        tracing::warn!(error = %why, rows = n, "an item's row cannot be read, not even its id; it is passed over: fix it with SQL");
    }
}

/// An id as bound, for a log line.
fn describe_value(v: &Value) -> String {
    match v {
        Value::String(Some(s)) => crate::printable::printable(s).into_owned(),
        Value::Bytes(Some(b)) => format!(
            "x'{}'",
            b.iter().map(|c| format!("{c:02x}")).collect::<String>()
        ),
        other => format!("{other:?}"),
    }
}
