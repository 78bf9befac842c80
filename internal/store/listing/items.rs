//! The console's item reads: a partition's items page by page in write
//! order, and one item, each with its data cut to a preview.

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::{ERROR_CHARS, PREVIEW_BYTES, Page, and_eq, check, clamp, like_escaped, page};
use crate::store::Store;
use crate::store::driver::{Int, Sql};
use crate::{Error, Result, validate};

/// An item, with its data cut to a preview.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct ItemView {
    /// Item id.
    pub id: String,
    /// Its partition.
    pub partition_id: String,
    /// Its gate.
    pub gate: i64,
    /// available, complete, failed or cancelled.
    pub status: String,
    /// Calls made for the current step.
    pub attempts: i32,
    /// Why the last call failed, cut to [`ERROR_CHARS`].
    pub last_error: Option<String>,
    /// Not tried before (epoch ms), None = now.
    pub not_before: Option<i64>,
    /// The item whose answer spawned it, if one did.
    pub parent_id: Option<String>,
    /// OCC version.
    pub version: i64,
    /// Epoch ms, database clock.
    pub updated_at: i64,
    /// Length of the data in bytes.
    pub data_bytes: i64,
    /// The first [`PREVIEW_BYTES`] bytes of data, as lossy UTF-8.
    pub data_preview: String,
}

/// Filters of [`Store::items`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ItemFilter {
    /// Only this gate.
    pub gate: Option<i64>,
    /// Only this status.
    pub status: Option<String>,
    /// Only ids starting with this (a range of the partition's key).
    pub prefix: Option<String>,
    /// Ids after this one (keyset pagination).
    pub after: Option<String>,
    /// Page size (capped at [`MAX_PAGE`](super::MAX_PAGE)).
    pub limit: u64,
}

/// [`ItemView`] as read: the data preview is bytes, `last_error` is whole.
#[derive(FromQueryResult)]
struct ItemRow {
    id: String,
    partition_id: String,
    gate: i64,
    status: String,
    attempts: i32,
    last_error: Option<String>,
    not_before: Option<i64>,
    parent_id: Option<String>,
    version: i64,
    updated_at: i64,
    data_bytes: Int,
    preview: Vec<u8>,
}

impl From<ItemRow> for ItemView {
    fn from(r: ItemRow) -> Self {
        ItemView {
            id: r.id,
            partition_id: r.partition_id,
            gate: r.gate,
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error.map(|e| e.chars().take(ERROR_CHARS).collect()),
            not_before: r.not_before,
            parent_id: r.parent_id,
            version: r.version,
            updated_at: r.updated_at,
            data_bytes: r.data_bytes.0,
            data_preview: String::from_utf8_lossy(&r.preview).into_owned(),
        }
    }
}

/// Refuses an item filter no row can match or a database cannot compare.
pub(super) fn check_items(partition: &str, f: &ItemFilter) -> Result<()> {
    validate::filter("partition id", partition)?;
    check(f.status.as_deref(), f.after.as_deref())?;
    if let Some(g) = f.gate {
        validate::gate("gate", g)?;
    }
    if let Some(p) = &f.prefix {
        validate::filter("prefix", p)?;
    }
    Ok(())
}

impl Store {
    /// A partition's items in the order they were written, filtered;
    /// NotFound for an unknown partition.
    pub async fn items(&self, partition: &str, f: &ItemFilter) -> Result<Page<ItemView>> {
        let limit = clamp(f.limit);
        let seq = self.driver.dialect().seq;
        check_items(partition, f)?;
        let items = self
            .item_views(|s| {
                self.picked(s, partition, f, f.after.as_deref());
                s.push(&format!(" ORDER BY i.{seq} LIMIT "))
                    .bind((limit + 1) as i64);
            })
            .await?;
        if items.is_empty() {
            self.partition_exists(partition).await?;
        }
        Ok(page(items, limit, |i| i.id.clone()))
    }

    /// Appends ` WHERE` and the conditions of the items of `partition`
    /// that `f` picks (gate, status, id prefix) after the item `after`
    /// in write order, to a read of `feed_items i`.
    pub(super) fn picked(&self, s: &mut Sql, partition: &str, f: &ItemFilter, after: Option<&str>) {
        let seq = self.driver.dialect().seq;
        s.push(" WHERE i.partition_id = ").bind(partition);
        and_eq(s, "i.gate", f.gate.map(Into::into));
        and_eq(s, "i.status", f.status.clone().map(Into::into));
        if let Some(p) = f.prefix.as_deref().filter(|p| !p.is_empty()) {
            s.push(" AND i.id LIKE ")
                .bind(format!("{}%", like_escaped(p)))
                .push(" ESCAPE '!' AND ");
            self.driver.id_starts(s, p);
        }
        if let Some(a) = after {
            // The cursor is the last item's id; the page goes on after
            // it in write order.
            s.push(&format!(
                " AND i.{seq} > (SELECT a.{seq} FROM feed_items a WHERE a.partition_id = "
            ))
            .bind(partition)
            .push(" AND a.id = ")
            .bind(a)
            .push(")");
        }
    }

    /// One item, its data cut to a preview: item `id` of `partition`, or
    /// of whichever partition has one by that id (see [`Store::locate`]).
    pub async fn item(&self, partition: Option<&str>, id: &str) -> Result<ItemView> {
        let partition = self.locate(partition, id).await?;
        self.item_views(|s| {
            s.push(" WHERE i.partition_id = ")
                .bind(partition.as_str())
                .push(" AND i.id = ")
                .bind(id);
        })
        .await?
        .pop()
        .ok_or_else(|| Error::NotFound(format!("item {id}")))
    }

    /// The partition of the item `id`: `partition` when given (checked),
    /// else the one partition with an item by that id. Ids are unique only
    /// within a partition, so an id alone may name items of several: that
    /// is refused ([`Error::Conflict`]), naming them, so that the caller
    /// can say which. Without a partition every partition is searched
    /// (every shard on a distributed database).
    pub async fn locate(&self, partition: Option<&str>, id: &str) -> Result<String> {
        validate::filter("item id", id)?;
        if let Some(p) = partition {
            validate::filter("partition id", p)?;
        }
        let mut s = Sql::new(self.driver);
        s.push("SELECT partition_id FROM feed_items WHERE id = ")
            .bind(id);
        if let Some(p) = partition {
            s.push(" AND partition_id = ").bind(p);
        }
        s.push(" ORDER BY partition_id LIMIT 4");
        let found: Vec<String> = self
            .fetch(s.statement())
            .await?
            .iter()
            .map(|r| crate::store::get(r, "partition_id"))
            .collect::<Result<_>>()?;
        match found.as_slice() {
            [] => Err(Error::NotFound(match partition {
                Some(p) => format!("item {id} in partition {p}"),
                None => format!("item {id}"),
            })),
            [one] => Ok(one.clone()),
            many => {
                let more = if many.len() > 3 { ", …" } else { "" };
                Err(Error::Conflict(format!(
                    "item id {id} names items of several partitions ({}{more}); say which partition",
                    many[..many.len().min(3)].join(", ")
                )))
            }
        }
    }

    /// The items the filter appended (to `FROM feed_items i`) picks.
    pub(in crate::store) async fn item_views(
        &self,
        filter: impl FnOnce(&mut Sql),
    ) -> Result<Vec<ItemView>> {
        let data = self.driver.data_column("i");
        let (gate, attempts) = (
            self.driver.listed_int("gate"),
            self.driver.listed_int("attempts"),
        );
        let mut s = Sql::new(self.driver);
        s.push(&format!(
            "SELECT i.id, i.partition_id, {gate}, i.status, {attempts}, i.last_error, i.not_before, \
             i.parent_id, i.version, i.updated_at, LENGTH({data}) AS data_bytes, \
             SUBSTR({data}, 1, {PREVIEW_BYTES}) AS preview FROM feed_items i"
        ));
        filter(&mut s);
        self.fetch(s.statement())
            .await?
            .iter()
            .map(|r| Ok(ItemRow::from_query_result(r, "")?.into()))
            .collect()
    }
}
