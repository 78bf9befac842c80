//! Searching a partition's items by a field of their JSON data
//! (`customer = "acme"`): the partition's items are read in write order,
//! a bounded number per page, and matched here, so that data that is not
//! JSON (or not UTF-8) is simply no match on every backend. Only one
//! partition's items are read (its key range): across every partition
//! the same search would read every item, so it is not offered.

use sea_orm::Value;

use super::items::{ItemFilter, ItemView, check_items};
use super::{Page, clamp};
use crate::store::Store;
use crate::store::driver::Sql;
use crate::{Error, Result};

/// Items read per statement while searching.
const CHUNK: u64 = 500;
/// Items read for one page at most; the page then says where it stopped.
pub const SEARCH_SPAN: u64 = 5_000;

/// A field of the data equal to a value: `customer = "acme"`,
/// `data.address.city = Paris`, `n = 3`.
#[derive(Clone, Debug, PartialEq)]
pub struct DataMatch {
    /// The field's path (object keys).
    pub path: Vec<String>,
    /// The value: JSON when it reads as JSON, else the text itself.
    pub value: serde_json::Value,
}

impl DataMatch {
    /// Reads `field = value`; a leading `data.` is allowed.
    pub fn parse(text: &str) -> Result<DataMatch> {
        let bad = || {
            Error::Invalid(format!(
                "a data search is field = value, such as customer = \"acme\" or address.city = Paris; not {text:?}"
            ))
        };
        let (field, value) = text.split_once('=').ok_or_else(bad)?;
        let field = field.trim();
        let field = field.strip_prefix("data.").unwrap_or(field);
        let path: Vec<String> = field.split('.').map(|k| k.trim().to_string()).collect();
        if path.iter().any(String::is_empty) {
            return Err(bad());
        }
        let value = value.trim();
        let value = serde_json::from_str(value).unwrap_or_else(|_| value.into());
        Ok(DataMatch { path, value })
    }

    /// Whether `data` is JSON whose field at the path equals the value.
    fn matches(&self, data: &[u8]) -> bool {
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
            return false;
        };
        let mut at = &json;
        for key in &self.path {
            match at.get(key) {
                Some(v) => at = v,
                None => return false,
            }
        }
        *at == self.value
    }
}

/// `(id, data)` rows in write order (`id, data`).
#[derive(sea_orm::FromQueryResult)]
struct Scanned {
    id: String,
    data: Vec<u8>,
}

impl Store {
    /// A page of `partition`'s items that `f` picks (its status, gate and
    /// id prefix) and whose data matches `m`, in write order after the
    /// item `f.after`. At most
    /// [`SEARCH_SPAN`] items are read for a page: `next` then names the
    /// last one read, and the page may hold fewer matches than `limit`.
    pub async fn search_items(
        &self,
        partition: &str,
        m: &DataMatch,
        f: &ItemFilter,
    ) -> Result<Page<ItemView>> {
        check_items(partition, f)?;
        let limit = clamp(f.limit);
        let seq = self.driver.dialect().seq;
        let data = self.driver.data_column("i");
        let (mut cursor, mut read, mut found) = (f.after.clone(), 0, Vec::new());
        let stopped = loop {
            let mut s = Sql::new(self.driver);
            s.push(&format!("SELECT i.id, {data} AS data FROM feed_items i"));
            self.picked(&mut s, partition, f, cursor.as_deref());
            s.push(&format!(" ORDER BY i.{seq} LIMIT "))
                .bind(CHUNK as i64);
            let rows = self.fetch(s.statement()).await?;
            let n = rows.len() as u64;
            for r in &rows {
                let row = <Scanned as sea_orm::FromQueryResult>::from_query_result(r, "")?;
                read += 1;
                cursor = Some(row.id.clone());
                if m.matches(&row.data) {
                    found.push(row.id);
                    if found.len() as u64 > limit {
                        break;
                    }
                }
            }
            if found.len() as u64 > limit || n < CHUNK {
                break false;
            }
            if read >= SEARCH_SPAN {
                break true;
            }
        };
        let more = found.len() as u64 > limit;
        found.truncate(limit as usize);
        let mut items = Vec::new();
        if !found.is_empty() {
            items = self
                .item_views(|s| {
                    s.push(" WHERE i.partition_id = ")
                        .bind(partition)
                        .push(" AND i.id IN (");
                    s.binds(found.iter().map(|id| Value::from(id.clone())));
                    s.push(&format!(") ORDER BY i.{seq}"));
                })
                .await?;
        } else {
            self.partition_exists(partition).await?;
        }
        let next = if more {
            items.last().map(|i| i.id.clone())
        } else if stopped {
            cursor
        } else {
            None
        };
        Ok(Page { data: items, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_reads_field_equals_value() {
        let m = DataMatch::parse(r#"data.customer = "acme""#).unwrap();
        assert_eq!(m.path, ["customer"]);
        assert!(m.matches(br#"{"customer": "acme", "n": 1}"#));
        assert!(!m.matches(br#"{"customer": "other"}"#));
        assert!(!m.matches(b"\xff not json"));
        let m = DataMatch::parse("address.city = Paris").unwrap();
        assert!(m.matches(br#"{"address": {"city": "Paris"}}"#));
        let m = DataMatch::parse("n = 3").unwrap();
        assert!(m.matches(br#"{"n": 3}"#) && !m.matches(br#"{"n": "3"}"#));
        assert!(DataMatch::parse("no equals").is_err());
        assert!(DataMatch::parse(" = 3").is_err());
    }
}
