//! Writes that must learn which rows they changed: taking a page of
//! partitions, leasing a list of them by OCC, closing them. PostgreSQL and
//! SQLite say so with `UPDATE … RETURNING` (and pick and take a page in one
//! statement); MariaDB has no `RETURNING` on `UPDATE` and cannot `LIMIT` a
//! subquery of the table it updates, so it reads the rows back.

use sea_orm::{ConnectionTrait, QueryResult, Value};

use super::{Driver, Sql, postgres, sqlite};
use crate::Result;
use crate::ids::{PartitionId, SessionId};
use crate::store::{Store, get};

/// Partitions leased per statement: a bounded `IN` list however many are free.
pub(crate) const LEASE_CHUNK: usize = 500;

/// Appends a test that `id` is one of the page picked by [`page`]; each
/// driver's own (see `picked` in its file).
pub(super) type Picked = fn(&mut Sql, &str, i64);

/// Appends the `SELECT` of up to `limit` unowned active partitions with
/// ids after `after`, in id order along `feed_partitions_held`.
pub(super) fn page(s: &mut Sql, columns: &str, after: &str, limit: i64) {
    let order = s.driver().dialect().unowned_order;
    s.push(&format!(
        "SELECT {columns} FROM feed_partitions p WHERE p.status = 'available' \
         AND p.owner IS NULL AND p.id > "
    ))
    .bind(after)
    .push(&format!(" ORDER BY {order} LIMIT "))
    .bind(limit);
}

impl Driver {
    /// See `Store::lease_page`.
    pub(crate) async fn lease_page(
        self,
        store: &Store,
        after: &str,
        limit: usize,
        me: &SessionId,
    ) -> Result<Vec<(PartitionId, i64)>> {
        let picked: Picked = match self {
            Driver::Sqlite => sqlite::picked,
            Driver::Postgres => postgres::picked,
            Driver::MySql => {
                let mut s = Sql::new(self);
                page(&mut s, "p.id, p.version", after, limit as i64);
                let pick = id_versions(&store.fetch(s.statement()).await?)?;
                return self.lease_many(store, &pick, me).await;
            }
        };
        // The pick's own test is repeated on each row as it is written,
        // folded so that the rows can only be found by their ids (as an
        // index condition, PostgreSQL read every unowned partition through
        // the status index and searched the pick for each: 0.4 s per page).
        let mut s = Sql::new(self);
        s.push("UPDATE feed_partitions SET owner = ")
            .bind(me)
            .push(", version = version + 1, updated_at = {now} WHERE ");
        picked(&mut s, after, limit as i64);
        s.push(
            " AND CASE WHEN owner IS NULL THEN status END = 'available' \
             RETURNING id, version",
        );
        id_versions(&store.fetch(s.statement()).await?)
    }

    /// See `Store::lease_many`.
    pub(crate) async fn lease_many(
        self,
        store: &Store,
        rows: &[(PartitionId, i64)],
        me: &SessionId,
    ) -> Result<Vec<(PartitionId, i64)>> {
        let mut taken = Vec::new();
        for chunk in rows.chunks(LEASE_CHUNK) {
            // The status test is folded into the version's so that the
            // rows can only be found by their ids: with stale statistics
            // PostgreSQL would otherwise read every available partition
            // through the status index.
            let mut s = Sql::new(self);
            s.push("UPDATE feed_partitions SET owner = ")
                .bind(me)
                .push(", version = version + 1, updated_at = {now} WHERE id IN (")
                .binds(ids(chunk))
                .push(") AND (id, CASE WHEN status = 'available' THEN version END) IN ");
            self.id_version_pairs(&mut s, chunk, 0);
            let rows = if self == Driver::MySql {
                store.run(s.statement()).await?;
                // Only this session writes its own id as owner, so the rows
                // that now name it are exactly the ones this statement took.
                let mut read = Sql::new(self);
                read.push("SELECT id, version FROM feed_partitions WHERE owner = ")
                    .bind(me)
                    .push(" AND id IN (")
                    .binds(ids(chunk))
                    .push(")");
                store.fetch(read.statement()).await?
            } else {
                s.push(" RETURNING id, version");
                store.fetch(s.statement()).await?
            };
            taken.extend(id_versions(&rows)?);
        }
        Ok(taken)
    }

    /// Closes and releases the partitions of `chunk` still owned by `me`
    /// whose `version` (an expression) is theirs there and for which
    /// `guard` holds; returns the ids closed.
    pub(crate) async fn close(
        self,
        store: &Store,
        chunk: &[(PartitionId, i64)],
        me: &SessionId,
        version: &str,
        guard: &str,
    ) -> Result<Vec<PartitionId>> {
        // The owner is tested inside the version's test too: as a test of
        // its own, PostgreSQL (with statistics from before the partitions
        // were leased) read every partition this session holds through the
        // owner index to find the chunk's (70,000 index entries per
        // statement of 500, 100,000 one-item partitions).
        let mut s = Sql::new(self);
        s.push(
            "UPDATE feed_partitions SET status = 'complete', owner = NULL, version = version + 1, \
             updated_at = {now} WHERE id IN (",
        )
        .binds(ids(chunk))
        .push(") AND (id, CASE WHEN owner = ")
        .bind(me)
        .push(&format!(" THEN {version} END) IN "));
        self.id_version_pairs(&mut s, chunk, 0);
        s.push(&format!(" AND {guard}"));
        let rows = if self == Driver::MySql {
            // No RETURNING: read back in the same transaction, which holds
            // the rows it changed, so no later change can hide a close.
            let mut read = Sql::new(self);
            read.push("SELECT id FROM feed_partitions WHERE id IN (")
                .binds(ids(chunk))
                .push(") AND status = 'complete' AND owner IS NULL AND (id, version) IN ");
            self.id_version_pairs(&mut read, chunk, 1);
            let (update, read) = (s.statement(), read.statement());
            store
                .retry(|| async {
                    let txn = store.begin_immediate().await?;
                    store.count(2);
                    txn.execute_raw(update.clone()).await?;
                    let rows = txn.query_all_raw(read.clone()).await?;
                    store.commit(txn).await?;
                    Ok(rows)
                })
                .await?
        } else {
            s.push(" RETURNING id");
            store.fetch(s.statement()).await?
        };
        rows.iter().map(|r| get(r, "id")).collect()
    }
}

/// The ids of `chunk`, as values.
fn ids(chunk: &[(PartitionId, i64)]) -> impl Iterator<Item = Value> + '_ {
    chunk.iter().map(|(id, _)| Value::from(id.clone()))
}

/// The `id` and `version` of each row.
pub(crate) fn id_versions(rows: &[QueryResult]) -> Result<Vec<(PartitionId, i64)>> {
    rows.iter()
        .map(|r| Ok((get(r, "id")?, get(r, "version")?)))
        .collect()
}
