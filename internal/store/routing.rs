//! Statements that serve many partitions at once, split where a statement
//! should touch one partition. On Citus a statement over several
//! partitions is planned over every shard they live on (a task per shard,
//! coordinated by the coordinator), where one over a single partition is
//! routed whole to the worker that holds it: the item path (dispatch
//! read, gate check, close) then runs on the partition's own worker.

use std::future::Future;

use futures_util::{StreamExt, TryStreamExt, stream};

use super::driver::Sql;
use super::{Driver, Store};
use crate::Result;
use crate::ids::PartitionId;

/// Statements of one partition each in flight at once, for one call.
const AT_ONCE: usize = 4;

impl Store {
    /// `f` over all of `items` in one call, or on Citus once per item (a
    /// few at a time), the results gathered in no particular order.
    pub(super) async fn per_partition<'a, T, R, F, Fut>(
        &self,
        items: &'a [T],
        f: F,
    ) -> Result<Vec<R>>
    where
        F: Fn(&'a [T]) -> Fut,
        Fut: Future<Output = Result<Vec<R>>>,
    {
        if *self.driver != Driver::Citus || items.len() < 2 {
            return f(items).await;
        }
        let calls: Vec<Fut> = items.chunks(1).map(f).collect();
        let parts: Vec<Vec<R>> = stream::iter(calls)
            .buffer_unordered(AT_ONCE)
            .try_collect()
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// On Citus, for a statement of one partition: binds its id and
    /// returns the placeholder, for the statement's subqueries to name
    /// the partition by its value rather than by the outer row's column.
    /// Citus routes a statement to one shard only when each table in it
    /// is narrowed to the partition by a value; a correlated
    /// `r.partition_id = p.id` sends it to every shard.
    pub(super) fn one_partition(&self, s: &mut Sql, ids: &[PartitionId]) -> Option<String> {
        match ids {
            [one] if *self.driver == Driver::Citus => s.bound(one.as_str()),
            _ => None,
        }
    }
}
