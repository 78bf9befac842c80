//! Test SQL written once for every backend: `?` where each value goes
//! (numbered `$n` for PostgreSQL here, in the tests only; Feed itself
//! writes each placeholder as it binds the value) and `{now}` for the
//! database clock.

use feed::store::Driver;
use sea_orm::{DbBackend, Statement, Value};

/// A statement for `driver` from test SQL; a `?` inside single quotes is
/// text.
pub fn statement(driver: Driver, sql: &str, values: Vec<Value>) -> Statement {
    let backend = driver.backend();
    let sql = sql.replace("{now}", driver.clock());
    if backend != DbBackend::Postgres {
        return Statement::from_sql_and_values(backend, sql, values);
    }
    let (mut out, mut quoted, mut n) = (String::with_capacity(sql.len()), false, 0);
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push_str(&format!("${n}"));
            }
            _ => out.push(c),
        }
    }
    Statement::from_sql_and_values(backend, out, values)
}
