//! The statements of writes that must learn which rows they changed:
//! taking a page of partitions, leasing a list of them by OCC, closing
//! them. PostgreSQL and SQLite say so with `UPDATE … RETURNING` (and pick
//! and take a page in one statement); MariaDB has no `RETURNING` on
//! `UPDATE` and cannot `LIMIT` a subquery of the table it updates, so each
//! write comes with the read of its rows. The store runs them.

use sea_orm::{Statement, Value};

use super::{Clocked, Driver, Sql, postgres, sqlite};
use crate::ids::{PartitionId, SessionId};

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

/// A write whose changed rows are wanted, as the store runs it.
pub(crate) enum Returning {
    /// The write returns its rows (`RETURNING`).
    Rows(Statement),
    /// The write, then the read of its rows (MariaDB); `together`: in one
    /// transaction, so no later change can hide one.
    ReadBack {
        write: Statement,
        read: Statement,
        together: bool,
    },
}

/// How a page of unowned partitions is leased.
pub(crate) enum LeasePage {
    /// One statement picks and takes the page, returning `id, version`.
    Take(Statement),
    /// This read picks the page (`id, version`); it is then leased by OCC
    /// (MariaDB).
    Pick(Statement),
}

impl Clocked {
    /// See `Store::lease_page`.
    pub(crate) fn lease_page(self, after: &str, limit: usize, me: &SessionId) -> LeasePage {
        let picked: Picked = match *self {
            Driver::Sqlite => sqlite::picked,
            Driver::Postgres => postgres::picked,
            // Citus cannot lock the rows of a read over every shard: the
            // page is read, then leased by OCC.
            Driver::MySql | Driver::Citus => {
                let mut s = Sql::new(self);
                page(&mut s, "p.id, p.version", after, limit as i64);
                return LeasePage::Pick(s.statement());
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
        LeasePage::Take(s.statement())
    }

    /// The lease of one chunk (at most [`LEASE_CHUNK`]) of `Store::lease_many`:
    /// its rows are `id, version`.
    pub(crate) fn lease_chunk(self, chunk: &[(PartitionId, i64)], me: &SessionId) -> Returning {
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
        if self != Driver::MySql {
            s.push(" RETURNING id, version");
            return Returning::Rows(s.statement());
        }
        // Only this session writes its own id as owner, so the rows that
        // now name it are exactly the ones this statement took.
        let mut read = Sql::new(self);
        read.push("SELECT id, version FROM feed_partitions WHERE owner = ")
            .bind(me)
            .push(" AND id IN (")
            .binds(ids(chunk))
            .push(")");
        Returning::ReadBack {
            write: s.statement(),
            read: read.statement(),
            together: false,
        }
    }

    /// Closes and releases the partitions of `chunk` still owned by `me`
    /// whose `version` (an expression) is theirs there and for which
    /// `guard` holds; its rows are the `id`s closed.
    pub(crate) fn close(
        self,
        chunk: &[(PartitionId, i64)],
        me: &SessionId,
        version: &str,
        guard: &str,
    ) -> Returning {
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
        if self != Driver::MySql {
            s.push(" RETURNING id");
            return Returning::Rows(s.statement());
        }
        // Read back in the same transaction, which holds the rows it
        // changed, so no later change can hide a close.
        let mut read = Sql::new(self);
        read.push("SELECT id FROM feed_partitions WHERE id IN (")
            .binds(ids(chunk))
            .push(") AND status = 'complete' AND owner IS NULL AND (id, version) IN ");
        self.id_version_pairs(&mut read, chunk, 1);
        Returning::ReadBack {
            write: s.statement(),
            read: read.statement(),
            together: true,
        }
    }
}

/// The ids of `chunk`, as values.
fn ids(chunk: &[(PartitionId, i64)]) -> impl Iterator<Item = Value> + '_ {
    chunk.iter().map(|(id, _)| Value::from(id.clone()))
}
