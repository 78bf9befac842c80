//! Connections on the wrong node. Behind a proxy, a DNS name or a pooler
//! that keeps sessions, a failover can leave a connection on the demoted
//! primary: it still answers (a ping succeeds) but refuses every write.
//! So on PostgreSQL a new connection is checked for its role, as libpq's
//! `target_session_attrs=read-write` does, and one that cannot write is
//! never handed out; and once a statement has been refused as read-only
//! (see [`Bound::wrong_node`]), a connection going back to the pool is
//! checked the same way and closed if it cannot write. The pool's
//! connection lifetime is the backstop.

use std::sync::Arc;

use sea_orm::sqlx::{self, PgConnection};

use super::timeout::{Bound, Hook, release_check};

/// Whether the connection's server takes writes (`transaction_read_only`
/// is off: a primary, not a standby nor a read-only database).
/// The simple protocol: no prepared statement, so it also works through a
/// pooler in transaction mode.
pub(crate) async fn writable(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    let row = sqlx::raw_sql(sqlx::AssertSqlSafe("SHOW transaction_read_only"))
        .fetch_one(conn)
        .await?;
    Ok(row.try_get::<String, _>(0)? == "off")
}

/// sqlx's `after_connect` hook on PostgreSQL: refuses a connection to a
/// server that cannot write when `primary` (a store that writes).
pub(crate) fn pg_after_connect<'c>(
    conn: &'c mut PgConnection,
    primary: bool,
    bound: &Arc<Bound>,
) -> Hook<'c, ()> {
    let bound = bound.clone();
    // sqlx logs every refusal at ERROR and tries again within milliseconds
    // (the processor's default log filter hides its line): one line here
    // at a bounded rate, with a count. The results and the heartbeat say
    // when the database is back.
    static REFUSED: crate::ratelog::Every = crate::ratelog::Every::new();
    Box::pin(async move {
        if !primary || writable(conn).await? {
            return Ok(());
        }
        bound.wrong_node();
        if let Some(n) = REFUSED.due() {
            tracing::warn!(
                refused = n,
                "a new connection's server takes no writes (a standby or a demoted primary): \
                 closed, connecting again until the primary answers"
            );
        }
        Err(sqlx::Error::Protocol(
            "the server takes no writes (transaction_read_only is on: a standby, a demoted primary \
             or a read-only database); Feed needs the primary: point --database-url at it \
             (or at a proxy that routes to it)"
                .into(),
        ))
    })
}

/// sqlx's `after_release` hook on PostgreSQL: the time-limit check, then,
/// while a statement was refused as read-only within the last statement
/// timeout, the role check (false closes the connection).
pub(crate) fn pg_after_release<'c>(
    conn: &'c mut PgConnection,
    bound: &Arc<Bound>,
) -> Hook<'c, bool> {
    let bound = bound.clone();
    Box::pin(async move {
        if !release_check(&mut *conn, &bound).await? {
            return Ok(false);
        }
        if !bound.wrong_node_within(bound.limit) {
            return Ok(true);
        }
        let ok = writable(conn).await.unwrap_or(false);
        if !ok {
            tracing::debug!("closing a connection to a server that takes no writes");
        }
        Ok(ok)
    })
}
