//! Poolers between Feed and PostgreSQL (PgBouncer, RDS Proxy…).
//!
//! In session mode a pooler hands Feed a server connection for as long as
//! Feed holds the client connection: nothing differs. In transaction mode
//! the server connection changes between transactions, and sqlx runs a
//! statement in two exchanges (prepare, then bind and execute) with a
//! named prepared statement: outside a transaction the second exchange
//! may reach another server, and named statements of different clients
//! collide on a shared server. So with [`Pooler::Transaction`] every
//! statement runs inside a transaction that deallocates its prepared
//! statements before it commits, nothing is cached per connection, the
//! role check uses the simple protocol, and there is no LISTEN (polling
//! wakes processors instead).

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbErr, ExecResult, QueryResult, Statement,
    TransactionTrait,
};

use super::Store;
pub use crate::config::Pooler;

impl Store {
    /// Whether statements must each run in a transaction of their own.
    fn per_transaction(&self) -> bool {
        self.pooler == Pooler::Transaction
    }

    /// Runs one statement, in a transaction of its own behind a
    /// transaction pooler.
    pub(super) async fn execute_raw(&self, st: Statement) -> Result<ExecResult, DbErr> {
        if !self.per_transaction() {
            return self.db.execute_raw(st).await;
        }
        let txn = self.db.begin().await?;
        let r = txn.execute_raw(st).await?;
        self.commit(txn).await?;
        Ok(r)
    }

    /// Runs one query, in a transaction of its own behind a transaction
    /// pooler.
    pub(super) async fn query_all_raw(&self, st: Statement) -> Result<Vec<QueryResult>, DbErr> {
        if !self.per_transaction() {
            return self.db.query_all_raw(st).await;
        }
        let txn = self.db.begin().await?;
        let rows = txn.query_all_raw(st).await?;
        self.commit(txn).await?;
        Ok(rows)
    }

    /// Commits `txn`; behind a transaction pooler its prepared statements
    /// are deallocated first, so the next client of that server connection
    /// meets none of them.
    pub(super) async fn commit(&self, txn: DatabaseTransaction) -> Result<(), DbErr> {
        if self.per_transaction() {
            txn.execute_unprepared("DEALLOCATE ALL").await?;
        }
        txn.commit().await
    }
}
