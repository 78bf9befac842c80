//! Read models for the dashboard and its JSON API: partitions and items in
//! keyset-paginated pages (`after` = the last id seen), one partition with
//! its per-gate counts, and the overview. Pages are served by primary-key
//! or `(partition_id, id)` index order, so they stay fast on large tables.

use std::collections::BTreeMap;

mod items;
mod search;

use sea_orm::{FromQueryResult, QueryResult, Value};
use serde::Serialize;

pub use items::{ItemFilter, ItemView};
pub use search::{DataMatch, SEARCH_SPAN};

use super::driver::{Int, Sql, sql};
use super::{Store, get};
use crate::ids::Tenant;
use crate::{Error, Result, validate};

/// Most rows one page returns.
pub const MAX_PAGE: u64 = 500;
/// Bytes of item data returned as a preview; the rest is never read.
pub const PREVIEW_BYTES: usize = 1024;
/// Characters of `last_error` returned.
pub const ERROR_CHARS: usize = 2000;

/// One page of a listing.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct Page<T> {
    /// The rows, in id order.
    pub data: Vec<T>,
    /// Pass as `after` for the next page; None on the last page.
    pub next: Option<String>,
}

/// A partition with its item counts.
#[derive(Debug, Serialize, FromQueryResult)]
#[non_exhaustive]
pub struct PartitionView {
    /// Partition id.
    pub id: String,
    /// available, complete, failed or cancelled.
    pub status: String,
    /// Nothing new is dispatched while true.
    pub paused: bool,
    /// Current gate.
    pub gate: i64,
    /// Session holding it.
    pub owner: Option<String>,
    /// Closes when nothing is left.
    pub auto_close: bool,
    /// Advanced only by an operator.
    pub manual_checkpoint: bool,
    /// block or continue.
    pub on_failure: String,
    /// The tenant it belongs to (flow control), if any.
    pub tenant: Option<Tenant>,
    /// Served before lower ones it shares turns with (-1000 to 1000).
    pub priority: i32,
    /// OCC version.
    pub version: i64,
    /// Epoch ms, database clock.
    pub created_at: i64,
    /// Epoch ms, database clock.
    pub updated_at: i64,
    /// Items per status.
    #[sea_orm(skip)]
    pub items_by_status: BTreeMap<String, i64>,
    /// Items per gate, then per status.
    #[sea_orm(skip)]
    pub items_by_gate: BTreeMap<i64, BTreeMap<String, i64>>,
    /// Available items scheduled for later (`not_before` ahead, no failed
    /// attempt: items waiting to retry are not counted), at any gate.
    #[sea_orm(skip)]
    pub scheduled_items: i64,
    /// When the first of them comes due (epoch ms, database clock).
    #[sea_orm(skip)]
    pub next_due: Option<i64>,
    /// Milliseconds from the database's now until then.
    #[sea_orm(skip)]
    pub next_due_in_ms: Option<i64>,
    /// Items completed per second over the last 5 minutes (or since the
    /// partition was created, when that is later).
    #[sea_orm(skip)]
    pub rate: f64,
    /// Milliseconds until its available items are done at that rate;
    /// None when it has no rate (unknown) or nothing is left.
    #[sea_orm(skip)]
    pub eta_ms: Option<i64>,
    /// Milliseconds since it was created (None when it has no items: the
    /// count that reads the clock read nothing).
    #[sea_orm(skip)]
    pub age_ms: Option<i64>,
}

/// The window a partition's rate is counted over.
const RATE_WINDOW_MS: i64 = 300_000;

/// Items of one partition at one gate with one status
/// (`partition_id, gate, status, COUNT(*) AS n`), as the status is stored,
/// with those of them scheduled for later and the first one's time.
#[derive(FromQueryResult)]
struct ItemCount {
    partition_id: String,
    gate: i64,
    status: String,
    n: i64,
    scheduled: Int,
    next_due: Option<i64>,
    now: i64,
    recent: Int,
}

/// Filters of [`Store::partitions`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct PartitionFilter {
    /// Only this status.
    pub status: Option<String>,
    /// Only ids starting with this.
    pub prefix: Option<String>,
    /// Only partitions of this tenant.
    pub tenant: Option<String>,
    /// Only partitions at this gate.
    pub gate: Option<i64>,
    /// Only partitions created at least this long ago (ms).
    pub min_age_ms: Option<i64>,
    /// Only partitions with an item whose `last_error` holds this text
    /// (any case); reads the items of each partition it checks.
    pub error: Option<String>,
    /// Ids after this one (keyset pagination).
    pub after: Option<String>,
    /// Page size (capped at [`MAX_PAGE`]).
    pub limit: u64,
}

pub(super) const PARTITION_COLUMNS: &str = "id, status, paused, gate, owner, auto_close, manual_checkpoint, \
    on_failure, tenant, priority, version, created_at, updated_at";

pub(super) fn partition_row(r: &QueryResult) -> Result<PartitionView> {
    Ok(PartitionView::from_query_result(r, "")?)
}

/// `text` for a LIKE pattern with `ESCAPE '!'`: its wildcards match
/// themselves.
fn like_escaped(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '!' | '%' | '_' => vec!['!', c],
            c => vec![c],
        })
        .collect()
}

/// Appends `AND column = <value>` when `value` is set.
fn and_eq(s: &mut Sql, column: &str, value: Option<Value>) {
    if let Some(v) = value {
        s.push(&format!(" AND {column} = ")).bind(v);
    }
}

/// Cuts a page of `limit + 1` rows to `limit` and names the next cursor.
fn page<T>(mut rows: Vec<T>, limit: u64, id: impl Fn(&T) -> String) -> Page<T> {
    let next = if rows.len() as u64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(id)
    } else {
        None
    };
    Page { data: rows, next }
}

/// Refuses filters no row can match or a database cannot compare.
fn check(status: Option<&str>, after: Option<&str>) -> Result<()> {
    if let Some(s) = status {
        validate::status(s)?;
    }
    if let Some(a) = after {
        validate::filter("after", a)?;
    }
    Ok(())
}

fn clamp(limit: u64) -> u64 {
    limit.clamp(1, MAX_PAGE)
}

impl Store {
    /// Partitions in id order, filtered, with per-gate item counts.
    pub async fn partitions(&self, f: &PartitionFilter) -> Result<Page<PartitionView>> {
        let limit = clamp(f.limit);
        let mut s = Sql::new(self.driver);
        s.push(&format!(
            "SELECT {PARTITION_COLUMNS} FROM feed_partitions WHERE 1 = 1"
        ));
        self.matching(&mut s, f)?;
        s.push(" ORDER BY id LIMIT ").bind((limit + 1) as i64);
        let rows = self.fetch(s.statement()).await?;
        let mut list = rows.iter().map(partition_row).collect::<Result<Vec<_>>>()?;
        let ids: Vec<String> = list
            .iter()
            .take(limit as usize)
            .map(|p| p.id.clone())
            .collect();
        self.add_counts(&mut list, &ids).await?;
        Ok(page(list, limit, |p| p.id.clone()))
    }

    /// The ids of the partitions `f` matches, in id order, a page at a time.
    pub async fn partition_ids(&self, f: &PartitionFilter) -> Result<Page<String>> {
        let limit = clamp(f.limit);
        let mut s = Sql::new(self.driver);
        s.push("SELECT id FROM feed_partitions WHERE 1 = 1");
        self.matching(&mut s, f)?;
        s.push(" ORDER BY id LIMIT ").bind((limit + 1) as i64);
        let rows = self.fetch(s.statement()).await?;
        let ids = rows
            .iter()
            .map(|r| get(r, "id"))
            .collect::<Result<Vec<String>>>()?;
        Ok(page(ids, limit, Clone::clone))
    }

    /// Appends `f`'s conditions (after a `WHERE`), refusing filters no
    /// row can match or a database cannot compare.
    fn matching(&self, s: &mut Sql, f: &PartitionFilter) -> Result<()> {
        check(f.status.as_deref(), f.after.as_deref())?;
        and_eq(s, "status", f.status.clone().map(Into::into));
        if let Some(t) = &f.tenant {
            validate::filter("tenant", t)?;
            s.push(" AND tenant = ").bind(t.clone());
        }
        if let Some(p) = f.prefix.as_deref().filter(|p| !p.is_empty()) {
            validate::filter("prefix", p)?;
            let escaped = like_escaped(p);
            // LIKE finds the range through the primary key; the exact
            // comparison makes case count on every backend.
            s.push(" AND id LIKE ")
                .bind(format!("{escaped}%"))
                .push(" ESCAPE '!' AND ");
            self.driver.id_starts(s, p);
        }
        if let Some(g) = f.gate {
            validate::gate("gate", g)?;
            s.push(" AND gate = ").bind(g);
        }
        if let Some(age) = f.min_age_ms {
            s.push(" AND created_at <= {now} - ").bind(age.max(0));
        }
        if let Some(text) = f.error.as_deref().filter(|t| !t.is_empty()) {
            validate::filter("error text", text)?;
            s.push(
                " AND EXISTS (SELECT 1 FROM feed_items e WHERE e.partition_id = feed_partitions.id \
                 AND e.last_error IS NOT NULL AND LOWER(e.last_error) LIKE ",
            )
            .bind(format!("%{}%", like_escaped(&text.to_lowercase())))
            .push(" ESCAPE '!')");
        }
        if let Some(a) = &f.after {
            s.push(" AND id > ").bind(a.clone());
        }
        Ok(())
    }

    pub(super) async fn add_counts(
        &self,
        list: &mut [PartitionView],
        ids: &[String],
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let later = "status = 'available' AND attempts = 0 AND steps = 0 AND not_before > {now}";
        let gate = self.driver.listed_int("gate");
        let mut s = Sql::new(self.driver);
        s.push(&format!(
            "SELECT partition_id, {gate}, status, COUNT(*) AS n, \
             COUNT(CASE WHEN {later} THEN 1 END) AS scheduled, \
             MIN(CASE WHEN {later} THEN not_before END) AS next_due, {{now}} AS now, \
             COUNT(CASE WHEN status = 'complete' AND updated_at >= {{now}} - {RATE_WINDOW_MS} THEN 1 END) AS recent \
             FROM feed_items i WHERE partition_id IN ("
        ))
        .binds(ids.iter().map(|i| Value::from(i.clone())))
        .push(") GROUP BY partition_id, i.gate, status");
        let rows = self.fetch(s.statement()).await?;
        let index: std::collections::HashMap<String, usize> = list
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id.clone(), i))
            .collect();
        for r in rows {
            let ItemCount {
                partition_id,
                gate,
                status,
                n,
                scheduled,
                next_due,
                now,
                recent,
            } = ItemCount::from_query_result(&r, "")?;
            let Some(&i) = index.get(&partition_id) else {
                continue;
            };
            let p = &mut list[i];
            p.age_ms = Some(now - p.created_at);
            p.rate += recent.0 as f64;
            p.scheduled_items += scheduled.0;
            if let Some(due) = next_due.filter(|d| p.next_due.is_none_or(|n| d < &n)) {
                p.next_due = Some(due);
                p.next_due_in_ms = Some(due - now);
            }
            *p.items_by_status.entry(status.clone()).or_default() += n;
            *p.items_by_gate
                .entry(gate)
                .or_default()
                .entry(status)
                .or_default() += n;
        }
        for p in list.iter_mut() {
            // `rate` holds the completions of the window until here.
            let window = p.age_ms.unwrap_or(0).clamp(1_000, RATE_WINDOW_MS) as f64 / 1000.0;
            p.rate /= window;
            let left = p.items_by_status.get("available").copied().unwrap_or(0);
            p.eta_ms = (p.rate > 0.0 && left > 0).then(|| (left as f64 / p.rate * 1000.0) as i64);
        }
        Ok(())
    }

    /// One partition with its per-gate item counts.
    pub async fn partition(&self, id: &str) -> Result<PartitionView> {
        validate::filter("partition id", id)?;
        let rows = self
            .fetch(sql!(self.driver;
                [&format!("SELECT {PARTITION_COLUMNS} FROM feed_partitions WHERE id = ")] {id}
            ))
            .await?;
        let mut list = rows.iter().map(partition_row).collect::<Result<Vec<_>>>()?;
        self.add_counts(&mut list, &[id.to_string()]).await?;
        list.pop()
            .ok_or_else(|| Error::NotFound(format!("partition {id}")))
    }

    pub(super) async fn partition_exists(&self, id: &str) -> Result<()> {
        let rows = self
            .fetch(sql!(self.driver; "SELECT id FROM feed_partitions WHERE id = " {id}))
            .await?;
        if rows.is_empty() {
            return Err(Error::NotFound(format!("partition {id}")));
        }
        Ok(())
    }
}
