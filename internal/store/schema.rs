//! Whether a database holds Feed's schema, read without writing: the
//! commands that only read (or change rows, never tables) check it instead
//! of migrating, so a wrong `--database-url` or an operator's `status`
//! never creates tables nor runs a slow migration at a busy moment.

use migration::MigratorTrait;
use sea_orm::{DbErr, TransactionTrait};

use super::{Pooler, Store};
use crate::Result;

/// A database whose schema is not the one this Feed reads and writes;
/// `processor migrate` (or `run`) brings it there.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// None of Feed's migrations is applied (a database without Feed's
    /// tables, e.g. a URL that names the wrong database).
    #[error("no Feed schema in this database (run processor migrate)")]
    Missing,
    /// Some of Feed's migrations are applied, this many are not.
    #[error(
        "the schema is {0} migration{s} behind (run processor migrate)",
        s = if *.0 == 1 { "" } else { "s" }
    )]
    Behind(usize),
    /// Citus is installed, and these of Feed's tables are not distributed
    /// (Citus came after Feed's schema, or a table was given back by hand).
    #[error(
        "Citus is installed but Feed's tables {0} are not distributed (the extension came after \
         Feed's schema, or a table was given back to the coordinator): run processor migrate, \
         which distributes them"
    )]
    Undistributed(String),
    /// Citus is installed and no node may hold shards: distributing fails.
    #[error(
        "Citus is installed but no node may hold shards: add workers on the coordinator \
         (SELECT citus_add_node('host', 5432)), or let the coordinator hold them \
         (SELECT citus_set_node_property('host', 5432, 'shouldhaveshards', true)); for plain \
         PostgreSQL, DROP EXTENSION citus"
    )]
    NoCitusWorkers,
}

impl Store {
    /// Ok when every migration of this Feed is applied; otherwise says
    /// what is missing ([`SchemaError`]). Only reads: no table is created,
    /// not even the migrations' own, so it also works on a standby.
    pub async fn check_schema(&self) -> Result<()> {
        let pending = self
            .pending_migrations()
            .await
            .map_err(|e| self.explain(e.into()))?;
        match pending {
            0 => match self.undistributed().await?.as_slice() {
                [] => Ok(()),
                left => Err(SchemaError::Undistributed(left.join(", ")).into()),
            },
            n if n >= migration::Migrator::migrations().len() => Err(SchemaError::Missing.into()),
            n => Err(SchemaError::Behind(n).into()),
        }
    }

    /// How many migrations are not applied, read without writing (behind a
    /// transaction pooler, in a transaction of its own: see `pooler`).
    pub(super) async fn pending_migrations(&self) -> Result<usize, DbErr> {
        if self.pooler != Pooler::Transaction {
            return Ok(
                migration::Migrator::get_pending_migrations_read_only(&self.db)
                    .await?
                    .len(),
            );
        }
        let txn = self.db.begin().await?;
        let pending = migration::Migrator::get_pending_migrations_read_only(&txn).await;
        self.commit(txn).await?;
        Ok(pending?.len())
    }
}

#[cfg(test)]
mod tests {
    use super::SchemaError;

    #[test]
    fn the_messages_say_what_to_run() {
        assert_eq!(
            SchemaError::Missing.to_string(),
            "no Feed schema in this database (run processor migrate)"
        );
        assert_eq!(
            SchemaError::Behind(1).to_string(),
            "the schema is 1 migration behind (run processor migrate)"
        );
        assert_eq!(
            SchemaError::Behind(3).to_string(),
            "the schema is 3 migrations behind (run processor migrate)"
        );
    }
}
