//! `processor export`: a partition's items in the order they were written,
//! read in keyset pages (each starts after the last `seq` of the one
//! before, one range of `feed_items_written`), so a partition of any size
//! streams in bounded memory.

use sea_orm::{FromQueryResult, Value};

use super::Store;
use crate::{Result, validate};

/// Items read per page.
pub const PAGE: usize = 500;

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
    after: Option<i64>,
    done: bool,
}

impl Store {
    /// An export of `partition`'s items, optionally only those with
    /// `status` and at `gate`; read it with [`Export::next_page`].
    pub fn export(
        &self,
        partition: &str,
        status: Option<&str>,
        gate: Option<i64>,
    ) -> Result<Export> {
        validate::filter("partition id", partition)?;
        if let Some(s) = status {
            validate::filter("status", s)?;
        }
        Ok(Export {
            store: self.clone(),
            partition: partition.into(),
            status: status.map(Into::into),
            gate,
            after: None,
            done: false,
        })
    }
}

impl Export {
    /// The next page of items (at most [`PAGE`]), or None after the last.
    /// NotFound when the partition does not exist.
    pub async fn next_page(&mut self) -> Result<Option<Vec<ExportedItem>>> {
        if self.done {
            return Ok(None);
        }
        let b = self.store.driver;
        let seq = b.seq();
        let mut sql = format!(
            "SELECT i.{seq} AS seq, i.id, i.gate, i.status, i.attempts, i.last_error, {} AS data \
             FROM feed_items i WHERE i.partition_id = ?",
            b.data_column("i")
        );
        let mut values: Vec<Value> = vec![self.partition.clone().into()];
        if let Some(s) = &self.status {
            sql.push_str(" AND i.status = ?");
            values.push(s.clone().into());
        }
        if let Some(g) = self.gate {
            sql.push_str(" AND i.gate = ?");
            values.push(g.into());
        }
        if let Some(a) = self.after {
            sql.push_str(&format!(" AND i.{seq} > ?"));
            values.push(a.into());
        }
        sql.push_str(&format!(" ORDER BY i.{seq} LIMIT ?"));
        values.push((PAGE as i64).into());
        let page = self
            .store
            .query(&sql, values)
            .await?
            .iter()
            .map(|r| Ok(ExportedItem::from_query_result(r, "")?))
            .collect::<Result<Vec<_>>>()?;
        if page.is_empty() && self.after.is_none() {
            self.store.partition_exists(&self.partition).await?;
        }
        self.done = page.len() < PAGE;
        self.after = page.last().map(|i| i.seq).or(self.after);
        Ok((!page.is_empty()).then_some(page))
    }
}
