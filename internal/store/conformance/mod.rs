//! The store's conformance suite: each store operation's contract, tested
//! directly (no processor, no handler) on SQLite, PostgreSQL and MariaDB.
//! Every driver must pass all of it; a new driver is done when it does.
//!
//! Each test gets a fresh, migrated database ([`Kit`]) and sets the rows
//! it needs with plain SQL, so a test states its whole situation. Races
//! are made deterministic with a transaction the test holds open.

mod clock;
mod controls;
mod dispatch;
mod events;
mod fence;
mod figures;
mod gates;
mod keys;
mod leasing;
mod limits;
mod listing;
mod producer;
mod prune;
mod routing;
mod sessions;
mod spawn;
mod statements;

use std::time::Duration;

use sea_orm::{Statement, TryGetableMany, Value};
use testkit::{Backend, Database};

use super::Store;
use super::driver::{Sql, sql};
use crate::ids::PartitionId;

/// Session expiry used by the suite: long enough that a test's sessions
/// stay live unless it makes one stale on purpose.
const EXPIRY: Duration = Duration::from_secs(60);

/// A fresh, migrated database and a store on it; the database is dropped
/// with the kit.
pub(super) struct Kit {
    backend: Backend,
    store: Store,
    db: Database,
}

impl Kit {
    /// None when the backend is unreachable outside CI (the test is skipped).
    async fn new(backend: Backend) -> Option<Kit> {
        let db = Database::fresh_migrated(backend, "feed_s_", 1).await?;
        let store = Store::connect(&db.url, 4).await.unwrap();
        Some(Kit { backend, store, db })
    }

    /// Runs a statement built as the store builds its own.
    async fn exec(&self, st: Statement) -> u64 {
        let sql = st.sql.clone();
        self.store
            .run(st)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs SQL without values (`{now}` is the database clock).
    async fn sql(&self, sql: &str) -> u64 {
        self.exec(sql!(self.store.driver(); [sql])).await
    }

    /// Runs each statement in turn.
    async fn sqls(&self, sqls: &[&str]) {
        for sql in sqls {
            self.sql(sql).await;
        }
    }

    /// The rows of `sql`, each as the tuple of the columns `cols`.
    async fn rows<T: TryGetableMany>(&self, sql: &str, cols: &[&str]) -> Vec<T> {
        let cols: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
        self.store
            .fetch(sql!(self.store.driver(); [sql]))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|r| r.try_get_many("", &cols).unwrap())
            .collect()
    }

    /// A live session.
    async fn session(&self, id: &str) {
        self.store
            .register_session(&id.into(), "host", 1, None)
            .await
            .unwrap();
    }

    /// A session whose last heartbeat is an hour old.
    async fn dead_session(&self, id: &str) {
        self.session(id).await;
        self.exec(sql!(self.store.driver();
            "UPDATE feed_processors SET heartbeat_at = heartbeat_at - 3600000 WHERE id = " {id}
        ))
        .await;
    }

    /// An `available` partition at gate 0 held by `owner` (None: nobody).
    async fn partition(&self, id: &str, owner: Option<&str>) {
        self.exec(sql!(self.store.driver();
            "INSERT INTO feed_partitions (id, owner) VALUES (" {id} ", " {owner} ")"
        ))
        .await;
    }

    /// Partitions `{prefix}000` … held by nobody, in one statement.
    async fn partitions(&self, prefix: &str, n: usize) -> Vec<PartitionId> {
        let ids: Vec<PartitionId> = (0..n).map(|i| format!("{prefix}{i:03}").into()).collect();
        for chunk in ids.chunks(500) {
            let values = chunk.iter().map(|id| Value::from(id.as_str())).collect();
            let mut s = Sql::new(self.store.driver());
            s.push("INSERT INTO feed_partitions (id) VALUES ")
                .rows(chunk.len(), values);
            self.exec(s.statement()).await;
        }
        ids
    }

    /// An item with `{}` as data at `gate`, with `status`.
    async fn item(&self, id: &str, partition: &str, gate: i64, status: &str) {
        self.exec(sql!(self.store.driver();
            "INSERT INTO feed_items (id, partition_id, gate, status, data) VALUES ("
            {id} ", " {partition} ", " {gate} ", " {status} ", " {b"{}".to_vec()} ")"
        ))
        .await;
    }

    /// An event of partition `id` ended with `status`, as Feed writes one.
    async fn event(&self, id: &str, status: crate::status::Status) {
        let txn = self.store.begin_write().await.unwrap();
        let ended = super::outbox::Happened::Ended(status);
        self.store
            .record_events(&txn, ended, &[id.into()])
            .await
            .unwrap();
        txn.commit().await.unwrap();
    }

    /// Items `(id, partition, gate, status)`, as [`Kit::item`].
    async fn items(&self, items: &[(&str, &str, i64, &str)]) {
        for (id, partition, gate, status) in items {
            self.item(id, partition, *gate, status).await;
        }
    }

    /// The columns `cols` of row `id` of `table`.
    async fn row<T: TryGetableMany>(&self, table: &str, id: &str, cols: &[&str]) -> T {
        let sql = format!("SELECT {} FROM {table} WHERE id = '{id}'", cols.join(", "));
        let rows = self.rows(&sql, cols).await;
        rows.into_iter()
            .next()
            .unwrap_or_else(|| panic!("no row {id} in {table}"))
    }

    /// A partition's (status, gate, version, owner).
    async fn partition_row(&self, id: &str) -> (String, i64, i64, Option<String>) {
        let cols = ["status", "gate", "version", "owner"];
        self.row("feed_partitions", id, &cols).await
    }

    /// An item's (status, gate, version, attempts).
    async fn item_row(&self, id: &str) -> (String, i64, i64, i32) {
        let cols = ["status", "gate", "version", "attempts"];
        self.row("feed_items", id, &cols).await
    }

    /// The ids `sql` returns (its `id` column), in its order.
    async fn ids(&self, sql: &str) -> Vec<String> {
        self.rows::<(String,)>(sql, &["id"])
            .await
            .into_iter()
            .map(|(id,)| id)
            .collect()
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        self.db.drop_blocking();
    }
}

/// Declares `async fn $name(k: Kit)` as one test per backend (all four
/// unless listed), in a module of that name. Citus runs in the Citus tier
/// (`cargo test --workspace --tests -- --ignored ::citus`), on the
/// loopback cluster of `contrib/citus/cluster.sh`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        $( $crate::store::conformance::conformance!($name: sqlite => Sqlite, postgres => Postgres, mariadb => Mysql, citus => Citus [slow]); )*
    };
    ($name:ident: $($test:ident => $backend:ident $([$tier:ident])?),*) => {
        mod $name {
            use testkit::Backend;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $( #[ignore = concat!(stringify!($tier), " tier: cargo test --workspace --tests -- --ignored")] )?
                async fn $test() {
                    if let Some(kit) = $crate::store::conformance::Kit::new(Backend::$backend).await {
                        super::$name(kit).await
                    }
                }
            )*
        }
    };
}
pub(crate) use conformance;
