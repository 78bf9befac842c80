//! Citus: PostgreSQL whose tables may be spread over worker nodes. Its SQL
//! is PostgreSQL's but for what a distributed engine refuses: a volatile
//! function in an `UPDATE` or `DELETE` of a distributed table, or any
//! function that is not immutable inside `CASE` or `COALESCE`. The clock is
//! therefore a scalar subquery, which Citus evaluates once on the
//! coordinator and sends to the workers as a value: still the database's
//! clock, read once per statement.

use super::{Dialect, postgres};

pub(super) const DIALECT: Dialect = Dialect {
    now: "(SELECT FLOOR(EXTRACT(EPOCH FROM CLOCK_TIMESTAMP()) * 1000)::BIGINT)",
    ..postgres::DIALECT
};
