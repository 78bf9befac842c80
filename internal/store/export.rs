//! `processor export`: a partition's items in the order they were written,
//! read in keyset pages (each starts after the last `seq` of the one
//! before, one range of `feed_items_written`), so a partition of any size
//! streams in bounded memory.
//!
//! A page is bounded by bytes, not only by items: each is planned first
//! from its items' sizes ([`Export::plan`]: at most [`PAGE`] items and
//! [`PAGE_BYTES`] of data, or one larger item alone), and only then read
//! ([`Export::fetch`]), so that a reader can make room for it before any
//! data comes in.
//!
//! A fan-in handler's inputs ([`Store::inputs`]) are read the same way:
//! the partition's items below a gate, from a cursor, up to a count that
//! a look ahead turns into a last `seq` ([`Export::limit`]).

use sea_orm::FromQueryResult;

use super::Store;
use super::driver::{Int, Sql};
use crate::{Result, validate};

/// Items read per page at most.
pub const PAGE: usize = 500;

/// Bytes of item data a page holds at most: 1 MiB. An item larger than
/// that is a page of its own.
pub const PAGE_BYTES: usize = 1 << 20;

/// One item as exported.
#[derive(Clone, Debug, FromQueryResult)]
#[non_exhaustive]
pub struct ExportedItem {
    /// Its place in the write order.
    pub seq: i64,
    /// Item id.
    pub id: String,
    /// Its gate.
    pub gate: i64,
    /// Its status.
    pub status: String,
    /// Attempts so far at its current step.
    pub attempts: i32,
    /// Why its last attempt failed.
    pub last_error: Option<String>,
    /// Not sent before this time (epoch milliseconds): its scheduled time,
    /// or the end of a retry's backoff.
    pub not_before: Option<i64>,
    /// The item whose answer spawned it, if one did.
    pub parent_id: Option<String>,
    /// Its data, as stored.
    pub data: Vec<u8>,
}

/// Which items of a partition an export reads, and where it has got to.
#[derive(Clone, Debug)]
pub struct Export {
    store: Store,
    partition: String,
    status: Option<String>,
    gate: Option<i64>,
    /// Only items at gates below this one (a fan-in's inputs).
    below: Option<i64>,
    after: Option<i64>,
    /// Nothing after this `seq` (the end of a limited page).
    until: Option<i64>,
    done: bool,
}

/// The next page, as planned from its items' sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Items in it.
    pub items: usize,
    /// Their data's bytes, as they were when planned.
    pub bytes: usize,
    /// The `seq` of its last item.
    last: i64,
    /// Nothing comes after it.
    last_page: bool,
}

impl Store {
    /// An export of `partition`'s items, optionally only those with
    /// `status` and at `gate`; read it with [`Export::next_page`]. Invalid
    /// for a status no item can have or a gate out of range.
    pub fn export(
        &self,
        partition: &str,
        status: Option<&str>,
        gate: Option<i64>,
    ) -> Result<Export> {
        validate::filter("partition id", partition)?;
        if let Some(s) = status {
            validate::status(s)?;
        }
        if let Some(g) = gate {
            validate::gate("gate", g)?;
        }
        Ok(Export {
            store: self.clone(),
            partition: partition.into(),
            status: status.map(Into::into),
            gate,
            below: None,
            after: None,
            until: None,
            done: false,
        })
    }

    /// The inputs of `partition`'s items at `gate`: its items at the gates
    /// below, in the order they were written; read them as an export.
    pub fn inputs(&self, partition: &str, gate: i64) -> Result<Export> {
        validate::gate("gate", gate)?;
        let mut export = self.export(partition, None, None)?;
        export.below = Some(gate);
        Ok(export)
    }
}

impl Export {
    /// `SELECT columns` of this export's items after `after`, in order.
    fn select(&self, columns: &str, after: Option<i64>) -> Sql {
        let seq = self.store.driver.dialect().seq;
        let mut sql = Sql::new(self.store.driver);
        sql.push(&format!(
            "SELECT {columns} FROM feed_items i WHERE i.partition_id = "
        ))
        .bind(self.partition.as_str());
        if let Some(s) = &self.status {
            sql.push(" AND i.status = ").bind(s.as_str());
        }
        if let Some(g) = self.gate {
            sql.push(" AND i.gate = ").bind(g);
        }
        if let Some(g) = self.below {
            sql.push(" AND i.gate < ").bind(g);
        }
        if let Some(a) = after {
            sql.push(&format!(" AND i.{seq} > ")).bind(a);
        }
        if let Some(u) = self.until {
            sql.push(&format!(" AND i.{seq} <= ")).bind(u);
        }
        sql
    }

    /// Starts after the item `id` of this partition (a cursor: the last
    /// id a reader got). Invalid when the partition has no such item.
    pub async fn after_item(&mut self, id: &str) -> Result<()> {
        validate::filter("after", id)?;
        let seq = self.store.driver.dialect().seq;
        let mut sql = Sql::new(self.store.driver);
        sql.push(&format!(
            "SELECT i.{seq} AS seq FROM feed_items i WHERE i.partition_id = "
        ))
        .bind(self.partition.as_str())
        .push(" AND i.id = ")
        .bind(id);
        let rows = self.store.fetch(sql.statement()).await?;
        let Some(row) = rows.first() else {
            return Err(crate::Error::Invalid(format!(
                "after: partition {:?} has no item {:?}",
                self.partition, id
            )));
        };
        self.after = Some(row.try_get("", "seq")?);
        Ok(())
    }

    /// Reads at most `count` items from here (at least 1). Looks ahead
    /// (two rows, skipping `count - 1`) for where they end: the id of the
    /// last of them when more items follow, to start the next page
    /// after; None when these are the last.
    pub async fn limit(&mut self, count: usize) -> Result<Option<String>> {
        let seq = self.store.driver.dialect().seq;
        let mut sql = self.select(&format!("i.{seq} AS seq, i.id"), self.after);
        let skip = i64::try_from(count.max(1) - 1).unwrap_or(i64::MAX);
        sql.push(&format!(" ORDER BY i.{seq} LIMIT 2 OFFSET "))
            .bind(skip);
        let rows = self.store.fetch(sql.statement()).await?;
        let Some(last) = rows.first() else {
            return Ok(None);
        };
        self.until = Some(last.try_get("", "seq")?);
        match rows.len() {
            2 => Ok(Some(last.try_get("", "id")?)),
            _ => Ok(None),
        }
    }

    /// Plans the next page from its items' sizes (no data is read); None
    /// after the last. NotFound when the partition does not exist.
    pub async fn plan(&mut self) -> Result<Option<Planned>> {
        if self.done {
            return Ok(None);
        }
        let b = self.store.driver;
        let seq = b.dialect().seq;
        let columns = format!("i.{seq} AS seq, LENGTH({}) AS size", b.data_column("i"));
        let mut sql = self.select(&columns, self.after);
        sql.push(&format!(" ORDER BY i.{seq} LIMIT "))
            .bind(PAGE as i64);
        let rows = self.store.fetch(sql.statement()).await?;
        if rows.is_empty() {
            if self.after.is_none() {
                self.store.partition_exists(&self.partition).await?;
            }
            self.done = true;
            return Ok(None);
        }
        let mut plan = Planned {
            items: 0,
            bytes: 0,
            last: 0,
            last_page: false,
        };
        for row in &rows {
            let size = usize::try_from(row.try_get::<Int>("", "size")?.0).unwrap_or(0);
            if plan.items > 0 && plan.bytes + size > PAGE_BYTES {
                return Ok(Some(plan));
            }
            plan.items += 1;
            plan.bytes += size;
            plan.last = row.try_get("", "seq")?;
        }
        plan.last_page = rows.len() < PAGE;
        Ok(Some(plan))
    }

    /// Reads the page `plan` planned (its items still there) and moves past it.
    pub async fn fetch(&mut self, plan: Planned) -> Result<Vec<ExportedItem>> {
        let b = self.store.driver;
        let seq = b.dialect().seq;
        let columns = format!(
            "i.{seq} AS seq, i.id, {}, i.status, {}, i.last_error, i.not_before, \
             i.parent_id, {} AS data",
            b.listed_int("gate"),
            b.listed_int("attempts"),
            b.data_column("i")
        );
        let mut sql = self.select(&columns, self.after);
        sql.push(&format!(" AND i.{seq} <= "))
            .bind(plan.last)
            .push(&format!(" ORDER BY i.{seq}"));
        let page = self
            .store
            .fetch(sql.statement())
            .await?
            .iter()
            .map(|r| Ok(ExportedItem::from_query_result(r, "")?))
            .collect::<Result<Vec<_>>>()?;
        self.after = Some(plan.last);
        self.done = plan.last_page;
        Ok(page)
    }

    /// The next page of items (at most [`PAGE`] items and [`PAGE_BYTES`],
    /// or one larger item), or None after the last. NotFound when the
    /// partition does not exist.
    pub async fn next_page(&mut self) -> Result<Option<Vec<ExportedItem>>> {
        while let Some(plan) = self.plan().await? {
            let page = self.fetch(plan).await?;
            // Empty when its items were pruned meanwhile: go on.
            if !page.is_empty() {
                return Ok(Some(page));
            }
        }
        Ok(None)
    }
}
