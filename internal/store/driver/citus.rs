//! Citus: PostgreSQL whose tables are spread over worker nodes. Its SQL is
//! PostgreSQL's but for what a distributed engine refuses: a volatile
//! function in an `UPDATE` or `DELETE` of a distributed table, or a
//! subquery in an `INSERT`. The clock is therefore `feed_now()`, which the
//! migrations create on Citus: the same database clock, declared stable, so
//! Citus reads it once on the coordinator for a write and sends the value
//! to the workers. (Citus still refuses any function that is not immutable
//! inside an `UPDATE`'s `CASE` or `COALESCE`: Feed's statements keep the
//! clock out of them.)

use sea_orm::Value;

use super::{Dialect, Sql, postgres};

pub(super) const DIALECT: Dialect = Dialect {
    now: "feed_now()",
    item_delete,
    // The coordinator plans each shard's part anew whatever the mode.
    plan_once: None,
    ..postgres::DIALECT
};

/// Rows found by their key (Citus has no `ctid` beyond one shard): the
/// page's finished items, up to the batch, each shard reading its own
/// partitions.
fn item_delete(s: &mut Sql, ids: Vec<Value>, partition_ok: &dyn Fn(&mut Sql), batch: i64) {
    s.push(
        "DELETE FROM feed_items WHERE (partition_id, id) IN (SELECT i.partition_id, i.id \
         FROM feed_partitions p JOIN feed_items i ON i.partition_id = p.id WHERE p.id IN (",
    )
    .binds(ids)
    .push(") AND i.status <> 'available' AND ");
    partition_ok(s);
    s.push(&format!(" LIMIT {batch}) AND status <> 'available'"));
}
