//! What differs between the databases Feed runs on: one driver per
//! database (`sqlite`, `postgres`, `mysql`), each a table of the SQL and
//! behaviour that is its own plus the statements it builds itself, behind
//! the one [`Driver`] enum. Shared by them: `sql` (statements built bind
//! by bind), `results` and `returning` (the writes whose statements differ
//! most), `errors` (what an error means). Every match over a `Driver`
//! names all three, so a new database is a new variant and a new file that
//! the compiler walks through; see docs/design.md, "Adding a backend".

mod citus;
mod connect;
mod dialect;
mod errors;
pub(crate) mod mysql;
mod postgres;
mod results;
mod returning;
mod sql;
pub(crate) mod sqlite;

pub(crate) use dialect::{Dialect, TokenLocks};
pub(crate) use errors::{Refusal, refusal};
pub use errors::{is_lost_statement, is_transient, is_wrong_node};
pub(crate) use results::result_statement;
pub(crate) use returning::{LEASE_CHUNK, LeasePage, Returning};
pub(crate) use sql::{Sql, sql};

use sea_orm::{DbBackend, Statement, Value};

use crate::config::Clock;
use crate::ids::PartitionId;

/// The database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// SQLite (the embedded default).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL and MariaDB.
    MySql,
    /// PostgreSQL with the Citus extension: PostgreSQL's SQL, with the
    /// differences a distributed engine needs (see `citus`).
    Citus,
}

/// A driver and the clock its statements read: what every statement is
/// built with, so that a test's movable clock reaches all of them. `{now}`
/// is the driver's clock expression, plus a movable clock's offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clocked {
    driver: Driver,
    clock: Clock,
}

impl Clocked {
    /// `driver` reading `clock`.
    pub(crate) fn new(driver: Driver, clock: Clock) -> Clocked {
        Clocked { driver, clock }
    }

    /// The `{now}` of a statement built at this moment.
    pub(crate) fn now(self) -> std::borrow::Cow<'static, str> {
        let now = self.driver.dialect().now;
        match self.clock.offset_ms() {
            None => now.into(),
            Some(offset) => format!("({now} + {offset})").into(),
        }
    }

    /// See [`Dialect::item_delete`]: the partitions of `page` whose test
    /// `partition_ok` followed by `age` holds; `batch` bounds the rows.
    pub(crate) fn item_delete(
        self,
        page: &[String],
        partition_ok: &str,
        age: i64,
        batch: i64,
    ) -> Statement {
        let mut s = Sql::new(self);
        let ids = page.iter().map(|id| Value::from(id.as_str())).collect();
        (self.dialect().item_delete)(
            &mut s,
            ids,
            &|s: &mut Sql| {
                s.push(partition_ok).bind(age);
            },
            batch,
        );
        s.statement()
    }
}

impl From<Driver> for Clocked {
    fn from(driver: Driver) -> Clocked {
        Clocked::new(driver, Clock::database())
    }
}

impl std::ops::Deref for Clocked {
    type Target = Driver;
    fn deref(&self) -> &Driver {
        &self.driver
    }
}

impl PartialEq<Driver> for Clocked {
    fn eq(&self, other: &Driver) -> bool {
        self.driver == *other
    }
}

/// The database clock as a value an index range can be bounded by
/// (`not_before <= {NOW_BOUND}`): PostgreSQL's clock function is volatile,
/// and a volatile expression is only ever a filter, so the range read
/// every entry of the gate; as a scalar subquery it is evaluated once and
/// bounds the range on every backend.
pub(crate) const NOW_BOUND: &str = "(SELECT {now})";

/// A limited `SELECT` as a branch of a `UNION ALL` where a branch cannot
/// be ordered or limited itself (SQLite): a derived table.
fn derived_branch(n: usize) -> (&'static str, String) {
    ("SELECT * FROM (", format!(") AS b{n}"))
}

impl Driver {
    /// The driver for a sea-orm backend; None for one Feed does not support.
    pub fn of(backend: DbBackend) -> Option<Driver> {
        match backend {
            DbBackend::Sqlite => Some(Driver::Sqlite),
            DbBackend::Postgres => Some(Driver::Postgres),
            DbBackend::MySql => Some(Driver::MySql),
            // sea-orm may add backends; Feed runs on none of them.
            _ => None,
        }
    }

    /// The database clock as integer epoch milliseconds, for SQL written
    /// by hand (tests) to compare times as Feed does.
    pub fn clock(self) -> &'static str {
        self.dialect().now
    }

    /// The sea-orm backend.
    pub fn backend(self) -> DbBackend {
        match self {
            Driver::Sqlite => DbBackend::Sqlite,
            Driver::Postgres | Driver::Citus => DbBackend::Postgres,
            Driver::MySql => DbBackend::MySql,
        }
    }

    /// What differs between the databases, as values.
    pub(crate) fn dialect(self) -> &'static Dialect {
        match self {
            Driver::Sqlite => &sqlite::DIALECT,
            Driver::Postgres => &postgres::DIALECT,
            Driver::MySql => &mysql::DIALECT,
            Driver::Citus => &citus::DIALECT,
        }
    }

    /// Appends the `SELECT … ORDER BY … LIMIT` that `select` appends as
    /// branch `n` of a `UNION ALL`; see [`Dialect::limited_branch`].
    pub(crate) fn limited_branch(self, s: &mut Sql, n: usize, select: &dyn Fn(&mut Sql)) {
        let (open, close) = (self.dialect().limited_branch)(n);
        s.push(open);
        select(s);
        s.push(&close);
    }

    /// Appends the right side of `(id, version) IN …` for `pairs`, each
    /// version plus `add`; see [`Dialect::id_version_pairs`].
    pub(crate) fn id_version_pairs(self, s: &mut Sql, pairs: &[(PartitionId, i64)], add: i64) {
        let (open, id, version) = self.dialect().id_version_pairs;
        s.push(open);
        for (k, (p, v)) in pairs.iter().enumerate() {
            s.push(if k == 0 { "(" } else { ", (" })
                .bind(p.clone())
                .push(id)
                .push(", ")
                .bind(v + add)
                .push(version)
                .push(")");
        }
        s.push(")");
    }

    /// `data` as bytes for an item aliased `alias`.
    pub(crate) fn data_column(self, alias: &str) -> String {
        (self.dialect().data_column)(alias)
    }

    /// Item column `i.{column}` (an integer) as a listing reads it: on
    /// SQLite, which keeps text in an INTEGER column, a value of another
    /// type reads as -1, so that one row written by hand cannot fail a
    /// whole list (dispatch fails that item with a `last_error` that says
    /// what it held).
    pub(crate) fn listed_int(self, column: &str) -> String {
        match self {
            Driver::Sqlite => format!(
                "CASE WHEN typeof(i.{column}) = 'integer' THEN i.{column} ELSE -1 END AS {column}"
            ),
            _ => format!("i.{column}"),
        }
    }

    /// Appends a test that `id` starts with `prefix`, byte for byte; see
    /// [`Dialect::id_starts`].
    pub(crate) fn id_starts(self, s: &mut Sql, prefix: &str) {
        s.push(self.dialect().id_starts)
            .bind(prefix.chars().count() as i32)
            .push(") = ")
            .bind(prefix);
    }

    /// Whether the database has LISTEN/NOTIFY (it has a [`Dialect::notify`]).
    pub(crate) fn has_listen(self) -> bool {
        self.dialect().notify.is_some()
    }

    /// SQL expressions joined into one string.
    pub(crate) fn concat(self, parts: &[&str]) -> String {
        (self.dialect().concat)(parts)
    }

    /// The `ORDER BY` list that reads the items of one gate without a time
    /// (`not_before IS NULL`, alias `a`) in write order, newest first when
    /// `desc`, along the dispatch index without a sort.
    pub(crate) fn unscheduled_order(self, a: &str, desc: bool) -> String {
        let (seq, dir) = (self.dialect().seq, if desc { " DESC" } else { "" });
        if self.dialect().null_fixes_order {
            format!("{a}.{seq}{dir}")
        } else {
            format!("{a}.not_before{dir}, {a}.{seq}{dir}")
        }
    }

    /// Whether writes from many connections run at once (SQLite has one
    /// writer at a time, so more only wait on its lock).
    pub fn concurrent_writes(self) -> bool {
        self.dialect().concurrent_writes
    }

    /// See [`Dialect::stale_statistics`].
    pub(crate) fn stale_statistics(self, least: i64, factor: i64) -> Option<Statement> {
        let sql = self.dialect().stale_statistics?;
        let values = vec![least.into(), factor.into()];
        Some(Statement::from_sql_and_values(self.backend(), sql, values))
    }

    /// See [`Dialect::autovacuum_off`].
    pub(crate) fn autovacuum_off(self) -> Option<Statement> {
        let sql = self.dialect().autovacuum_off?;
        Some(Statement::from_string(self.backend(), sql))
    }

    /// See [`Dialect::upsert`].
    pub(crate) fn upsert(self, key: &str, columns: &[&str]) -> String {
        (self.dialect().upsert)(key, columns)
    }
}

/// `ON CONFLICT … DO UPDATE` (PostgreSQL and SQLite).
fn on_conflict(key: &str, columns: &[&str]) -> String {
    if columns.is_empty() {
        return format!(" ON CONFLICT ({key}) DO NOTHING");
    }
    let set: Vec<String> = columns
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(" ON CONFLICT ({key}) DO UPDATE SET {}", set.join(", "))
}

/// An integer column whose type differs by backend (PostgreSQL's
/// `LENGTH(…)` is 4-byte, the others' 8-byte): read as whichever fits.
pub struct Int(pub i64);

impl sea_orm::TryGetable for Int {
    fn try_get_by<I: sea_orm::ColIdx>(
        res: &sea_orm::QueryResult,
        index: I,
    ) -> std::result::Result<Self, sea_orm::TryGetError> {
        i64::try_get_by(res, index)
            .or_else(|_| i32::try_get_by(res, index).map(i64::from))
            .map(Int)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_written_as_values_are_bound() {
        let (a, b) = (1, "b?");
        let s = sql!(Driver::Postgres; "a = " {a} " AND b = " {b} " AND c = '?'");
        assert_eq!(s.sql, "a = $1 AND b = $2 AND c = '?'");
        let s = sql!(Driver::Sqlite; "a = " {a} " AND b = " {b});
        assert_eq!(s.sql, "a = ? AND b = ?");
        assert_eq!(s.values.map(|v| v.0.len()), Some(2));
    }

    #[test]
    fn every_driver_has_its_clock() {
        for d in [Driver::Sqlite, Driver::Postgres, Driver::MySql] {
            assert_eq!(Driver::of(d.backend()), Some(d));
            assert!(!sql!(d; "SELECT {now}").sql.contains("{now}"));
        }
    }
}
