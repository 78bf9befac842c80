//! Reading what a database's error means (transient, a wrong node, a
//! lost prepared statement, a refusal to connect): each driver names its
//! own codes, never message text.

use super::{mysql, postgres, sqlite};

/// Whether an error says the connection is on a server that cannot write
/// (a standby, a demoted primary, a read-only replica): the statement is
/// retried, and connections are checked for their role before reuse.
pub fn is_wrong_node(err: &sea_orm::DbErr) -> bool {
    use sea_orm::{DbErr, RuntimeErr};
    let (DbErr::Conn(RuntimeErr::SqlxError(e))
    | DbErr::Exec(RuntimeErr::SqlxError(e))
    | DbErr::Query(RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    let Some(d) = e.as_database_error() else {
        return false;
    };
    if let Some(pg) = d.try_downcast_ref::<sea_orm::sqlx::postgres::PgDatabaseError>() {
        return pg.code() == postgres::READ_ONLY;
    }
    d.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|my| mysql::READ_ONLY.contains(&my.number()))
}

/// Whether PostgreSQL says a prepared statement of this connection is
/// missing or taken: the connection changes server between statements
/// (a pooler in transaction mode).
pub fn is_lost_statement(err: &sea_orm::DbErr) -> bool {
    use sea_orm::{DbErr, RuntimeErr};
    let (DbErr::Conn(RuntimeErr::SqlxError(e))
    | DbErr::Exec(RuntimeErr::SqlxError(e))
    | DbErr::Query(RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sea_orm::sqlx::postgres::PgDatabaseError>())
        .is_some_and(|pg| postgres::LOST_STATEMENT.contains(&pg.code()))
}

/// Whether an error is transient and the statement should be retried:
/// a dropped or unavailable connection, or a conflict the database asks
/// the client to retry. Read from the driver's error kind and codes, never
/// from message text: each driver says which of its codes are transient.
pub fn is_transient(err: &sea_orm::DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    use sea_orm::{DbErr, RuntimeErr};
    let e = match err {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return false,
    };
    match e.as_ref() {
        Sqlx::Io(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed | Sqlx::WorkerCrashed => true,
        Sqlx::Database(d) => mysql::transient(d.as_ref())
            .or_else(|| sqlite::transient(d.as_ref()))
            .or_else(|| postgres::transient(d.as_ref()))
            .unwrap_or(false),
        _ => false,
    }
}

/// A refusal to connect that lasts until someone acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server has no database of the URL's name.
    NoDatabase,
    /// The server refused the login.
    Login,
    /// SQLite cannot open (or create) the file.
    CannotOpen,
}

/// Whether an error met while connecting is a [`Refusal`], read from the
/// driver's codes (each driver says which of its codes are).
pub(crate) fn refusal(d: &dyn sea_orm::sqlx::error::DatabaseError) -> Option<Refusal> {
    mysql::refusal(d)
        .or_else(|| sqlite::refusal(d))
        .or_else(|| postgres::refusal(d))
        .flatten()
}
