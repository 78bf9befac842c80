//! What Feed needs to know of Citus itself: which nodes may hold shards,
//! and whether Feed's tables are distributed as its migrations leave them.
//! A schema made before the extension was added, or a table given back to
//! the coordinator by hand, is only partly distributed: Feed's statements
//! on Citus would then fail one by one, so it is found and said at once.

use sea_orm::{DbBackend, Statement};

use super::{Driver, SchemaError, Store, get};
use crate::Result;

/// The nodes of a Citus cluster that may hold shards.
#[derive(Clone, Copy)]
pub(super) enum Nodes {
    /// At least one worker (or not Citus at all).
    Workers,
    /// The coordinator alone: Citus puts every shard there (it adds itself
    /// to an empty node list on the first distributed table).
    CoordinatorOnly,
    /// No node may hold shards: distributing a table fails.
    None,
}

impl Nodes {
    /// Ok when a table can be distributed; otherwise says how to add a node.
    pub(super) fn ready(self) -> Result<()> {
        match self {
            Nodes::None => Err(SchemaError::NoCitusWorkers.into()),
            _ => Ok(()),
        }
    }
}

impl Store {
    /// The nodes that may hold shards (`Workers` off Citus). The
    /// coordinator alone is a warning: every row then stays on one machine.
    pub(super) async fn citus_nodes(&self) -> Result<Nodes> {
        if *self.driver != Driver::Citus {
            return Ok(Nodes::Workers);
        }
        let rows = self
            .fetch(pg(
                "SELECT COUNT(*) FILTER (WHERE groupid <> 0 AND shouldhaveshards) AS workers, \
                 COUNT(*) FILTER (WHERE groupid = 0 AND shouldhaveshards) AS coordinator, \
                 COUNT(*) AS nodes FROM pg_dist_node WHERE isactive AND noderole = 'primary'",
            ))
            .await?;
        let count = |column| rows.first().map_or(Ok(0), |r| get::<i64>(r, column));
        let (workers, coordinator, nodes) =
            (count("workers")?, count("coordinator")?, count("nodes")?);
        if workers > 0 {
            return Ok(Nodes::Workers);
        }
        if coordinator == 0 && nodes > 0 {
            return Ok(Nodes::None);
        }
        tracing::warn!(
            "Citus has no worker node: Feed's partitions stay on the coordinator alone; add \
             workers (SELECT citus_add_node('host', 5432)) and move shards onto them \
             (SELECT citus_rebalance_start())"
        );
        Ok(Nodes::CoordinatorOnly)
    }

    /// Feed's tables that Citus should distribute (or copy to every node)
    /// and does not; empty off Citus and before the schema exists.
    pub(super) async fn undistributed(&self) -> Result<Vec<String>> {
        if *self.driver != Driver::Citus {
            return Ok(Vec::new());
        }
        let names: Vec<String> = migration::citus::tables()
            .map(|t| format!("('{t}')"))
            .collect();
        let sql = format!(
            "SELECT t.name AS name FROM (VALUES {}) AS t(name) \
             WHERE to_regclass(t.name) IS NOT NULL AND NOT EXISTS \
             (SELECT 1 FROM pg_dist_partition d WHERE d.logicalrelid = to_regclass(t.name)) \
             ORDER BY t.name",
            names.join(", ")
        );
        let rows = self.fetch(pg(&sql)).await?;
        rows.iter().map(|r| get(r, "name")).collect()
    }

    /// After migrating on Citus: distributes what is left on the
    /// coordinator, moving its rows onto the workers.
    pub(super) async fn finish_distribution(&self, nodes: Nodes) -> Result<()> {
        let left = self.undistributed().await?;
        if left.is_empty() {
            return Ok(());
        }
        nodes.ready()?;
        tracing::warn!(
            tables = %left.join(", "),
            "Feed's tables are only partly distributed on Citus: distributing the rest"
        );
        let txn = self.begin_write().await?;
        migration::citus::distribute(&txn).await?;
        self.commit(txn).await?;
        Ok(())
    }
}

fn pg(sql: &str) -> Statement {
    Statement::from_string(DbBackend::Postgres, sql)
}
