//! Inserting an enqueue's items: in statements bounded by items and bytes.

use sea_orm::{ConnectionTrait, DatabaseTransaction};

use super::driver::{Clocked, Sql, sql};
use super::{NewItem, Schedule};
use crate::{Error, Result};

/// Items per insert statement at most.
const BATCH: usize = 500;

/// Data per insert statement at most (one larger item goes alone): the
/// drivers copy each value on its way in, so this bounds those copies.
const BATCH_BYTES: usize = 1 << 20;

/// `items` cut into the runs each insert statement carries: at most
/// [`BATCH`] items and [`BATCH_BYTES`] of data, at least one item.
pub(super) fn statements(items: &[NewItem]) -> impl Iterator<Item = &[NewItem]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len() && n < BATCH && (n == 0 || bytes + rest[n].data.len() <= BATCH_BYTES) {
            bytes += rest[n].data.len();
            n += 1;
        }
        let (run, after) = rest.split_at(n);
        rest = after;
        Some(run)
    })
}

/// Inserts one statement's run of `items` into `partition`, at `gate`
/// unless an item has its own. An id that exists already is refused
/// ([`Error::Invalid`]), the transaction's writes with it.
pub(super) async fn insert_items(
    txn: &DatabaseTransaction,
    b: Clocked,
    partition: &str,
    gate: i64,
    items: &[NewItem],
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    // Items with a time carry it in `not_before`: the time given, or the
    // database's clock plus the delay, so that a delay runs on the clock
    // every processor compares with. The optional columns are written
    // only when an item of the run has them: runs without keep the shape
    // of before.
    let scheduled = items.iter().any(|i| i.schedule.is_some());
    let traced = items.iter().any(|i| i.traceparent.is_some());
    let spawned = items.iter().any(|i| i.parent.is_some());
    let mut sql = Sql::new(b);
    sql.push("INSERT INTO feed_items (id, partition_id, gate, data");
    if scheduled {
        sql.push(", not_before");
    }
    if traced {
        sql.push(", traceparent");
    }
    if spawned {
        sql.push(", parent_id");
    }
    sql.push(") VALUES ");
    for (k, item) in items.iter().enumerate() {
        let id = item
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        sql!(into sql;
            [if k == 0 { "(" } else { ", (" }] {id} ", " {partition} ", "
            {item.gate.unwrap_or(gate)} ", " {item.data.to_vec()}
        );
        if scheduled {
            let (at, after) = match item.schedule {
                Some(Schedule::At(ms)) => (Some(ms), None),
                Some(Schedule::After(d)) => (None, Some(super::ms(d))),
                None => (None, None),
            };
            sql!(into sql; ", COALESCE(" {at} ", {now} + " {after} ")");
        }
        if traced {
            sql.push(", ").bind(item.traceparent.clone());
        }
        if spawned {
            sql.push(", ").bind(item.parent.clone());
        }
        sql.push(")");
    }
    txn.execute_raw(sql.statement()).await.map_err(|e| {
        if matches!(e.sql_err(), Some(sea_orm::SqlErr::UniqueConstraintViolation(_))) {
            Error::Invalid(format!(
                "an item id already exists in this partition (ids are unique within a partition); nothing was written: {e}"
            ))
        } else {
            Error::Db(e)
        }
    })?;
    Ok(())
}

/// Wakes listening processors when `txn` commits: PostgreSQL's `NOTIFY
/// feed_items` (queued with the transaction, so sent only if it commits);
/// nothing elsewhere. Feed's own writes that add runnable items call it:
/// no trigger does (a distributed database cannot run one), and items a
/// producer inserts with plain SQL are found by the next poll.
pub(super) async fn wake(txn: &DatabaseTransaction, b: Clocked) -> Result<()> {
    if let Some(notify) = b.dialect().notify {
        txn.execute_unprepared(notify).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_bounded_by_items_and_bytes() {
        let sizes = |items: &[NewItem]| statements(items).map(<[NewItem]>::len).collect::<Vec<_>>();
        let small: Vec<NewItem> = (0..1200).map(|_| NewItem::new(vec![0; 10])).collect();
        assert_eq!(sizes(&small), [500, 500, 200]);
        let big: Vec<NewItem> = (0..5).map(|_| NewItem::new(vec![0; 400 << 10])).collect();
        assert_eq!(sizes(&big), [2, 2, 1]);
        let huge = vec![NewItem::new(vec![0; 3 << 20]), NewItem::new(vec![0; 1])];
        assert_eq!(sizes(&huge), [1, 1]);
        assert!(sizes(&[]).is_empty());
    }
}
