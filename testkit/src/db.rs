//! A fresh, uniquely named database per test or benchmark run, on SQLite
//! (a temporary file), PostgreSQL or MariaDB (a database created on the
//! server and dropped afterwards).

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use feed::Store;
use sea_orm::{ConnectionTrait, QueryResult, Value};
use serde::Serialize;

/// A database server Feed runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A file next to the processor.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MariaDB or MySQL.
    #[value(name = "mariadb", alias = "mysql")]
    #[serde(rename = "mariadb")]
    Mysql,
    /// Citus: PostgreSQL with its tables spread over worker nodes (the
    /// loopback cluster of `contrib/citus/cluster.sh`).
    Citus,
}

/// The ports of the Citus cluster's nodes, the coordinator first and the
/// spare worker last: a test database is created on each, from the
/// template `feed_citus` (the extension; the workers but the spare
/// registered), so that a test can add the spare.
const CITUS_NODES: [u16; 4] = [9700, 9701, 9702, CITUS_SPARE];

/// The port of the Citus worker that a test database does not use until
/// the test adds it.
pub const CITUS_SPARE: u16 = 9703;

/// The URL of database `db` on the Citus node at `port`.
fn citus_node(port: u16, db: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/{db}?sslmode=disable")
}

impl Backend {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mariadb",
            Backend::Citus => "citus",
        }
    }
}

/// Where the PostgreSQL and MariaDB servers are (URLs without a database).
#[derive(Clone, Debug, Serialize)]
pub struct Servers {
    /// e.g. `postgres://postgres@127.0.0.1:5432`.
    pub postgres: String,
    /// e.g. `mysql://root@127.0.0.1:3306`.
    pub mariadb: String,
}

impl Default for Servers {
    fn default() -> Self {
        Servers {
            postgres: "postgres://postgres@127.0.0.1:5432".into(),
            mariadb: "mysql://root@127.0.0.1:3306".into(),
        }
    }
}

impl Servers {
    /// The URL of database `db` on the backend's server; None for SQLite.
    pub fn url(&self, backend: Backend, db: &str) -> Result<Option<String>> {
        let base = match backend {
            Backend::Sqlite => return Ok(None),
            Backend::Citus => return Ok(Some(citus_node(CITUS_NODES[0], db))),
            Backend::Postgres => &self.postgres,
            Backend::Mysql => &self.mariadb,
        };
        let mut u = url::Url::parse(base).with_context(|| format!("bad server URL {base}"))?;
        u.set_path(&format!("/{db}"));
        Ok(Some(u.to_string()))
    }

    /// The database to connect to for creating and dropping others.
    pub fn admin(&self, backend: Backend) -> Result<Option<String>> {
        let db = match backend {
            Backend::Postgres | Backend::Citus => "postgres",
            _ => "",
        };
        self.url(backend, db)
    }

    /// Whether a backend's server answers; the reason when it does not.
    pub async fn reachable(&self, backend: Backend) -> Result<(), String> {
        let Some(admin) = self.admin(backend).map_err(|e| e.to_string())? else {
            return Ok(());
        };
        let store = connect(&admin, 1).await.map_err(|e| format!("{e:#}"))?;
        let r = store.connection().execute_unprepared("SELECT 1").await;
        let _ = store.connection().clone().close().await;
        r.map(drop).map_err(|e| e.to_string())
    }
}

/// Connects, giving up after 15 seconds.
pub async fn connect(url: &str, pool: u32) -> Result<Store> {
    match tokio::time::timeout(Duration::from_secs(15), Store::connect(url, pool)).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("connecting timed out"),
    }
}

/// A uniquely named database; [`Database::drop_db`] (or the blocking
/// [`Database::drop_blocking`]) removes it.
pub struct Database {
    /// Its backend.
    pub backend: Backend,
    /// The URL a processor is given.
    pub url: String,
    /// Its name on the server.
    pub name: String,
    /// A pool on it.
    pub store: Store,
    admin: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    /// Creates an empty database named `<prefix><uuid>` (without Feed's tables).
    pub async fn create(
        backend: Backend,
        servers: &Servers,
        prefix: &str,
        pool: u32,
    ) -> Result<Database> {
        Self::make(backend, servers, prefix, pool, true, None).await
    }

    /// `create`; a database that is not `durable` (PostgreSQL) commits
    /// without waiting for the disk: tests never crash the server, and a
    /// commit that waits a second on a busy machine's disk would measure
    /// the machine, not Feed. (Benchmarks keep durable commits, as users do.)
    async fn make(
        backend: Backend,
        servers: &Servers,
        prefix: &str,
        pool: u32,
        durable: bool,
        template: Option<&str>,
    ) -> Result<Database> {
        let name = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
        let admin = servers.admin(backend)?;
        let (url, dir) = match servers.url(backend, &name)? {
            None => {
                let dir = tempfile::Builder::new().prefix("feed-").tempdir()?;
                let url = format!("sqlite://{}/feed.db?mode=rwc", dir.path().display());
                (url, Some(dir))
            }
            Some(url) => {
                let on = admin.as_deref().unwrap_or_default();
                match template {
                    _ if backend == Backend::Citus => {
                        for port in CITUS_NODES {
                            let create = format!("CREATE DATABASE {name} TEMPLATE feed_citus");
                            if let Err(e) = execute_on(&citus_node(port, "postgres"), &create).await
                            {
                                drop_database(backend, admin.as_deref(), &name).await;
                                return Err(e);
                            }
                        }
                    }
                    Some(t) if backend == Backend::Mysql => {
                        crate::template::copy_mysql(on, t, &name).await?
                    }
                    Some(t) => {
                        execute_on(on, &format!("CREATE DATABASE {name} TEMPLATE {t}")).await?
                    }
                    None => execute_on(on, &format!("CREATE DATABASE {name}")).await?,
                }
                if !durable && backend == Backend::Postgres {
                    let set = format!("ALTER DATABASE {name} SET synchronous_commit = off");
                    if let Err(e) = execute_on(on, &set).await {
                        drop_database(backend, admin.as_deref(), &name).await;
                        return Err(e);
                    }
                }
                (url, None)
            }
        };
        let store = match connect(&url, pool).await {
            Ok(s) => s,
            Err(e) => {
                drop_database(backend, admin.as_deref(), &name).await;
                return Err(e);
            }
        };
        Ok(Database {
            backend,
            url,
            name,
            store,
            admin,
            _dir: dir,
        })
    }

    /// An empty database on the default servers, or None when the
    /// backend's server is unreachable and `CI` is unset (the test is
    /// skipped, saying why). In CI an unreachable server panics, so that a
    /// suite never passes by skipping.
    pub async fn fresh(backend: Backend, prefix: &str, pool: u32) -> Option<Database> {
        let servers = Self::servers(backend).await?;
        Some(
            Self::make(backend, &servers, prefix, pool, false, None)
                .await
                .unwrap(),
        )
    }

    /// [`Database::fresh`] with Feed's tables: on PostgreSQL and MariaDB a
    /// copy of a template migrated once per test process (so no test pays
    /// for every migration); on SQLite migrated.
    pub async fn fresh_migrated(backend: Backend, prefix: &str, pool: u32) -> Option<Database> {
        let servers = Self::servers(backend).await?;
        let template = crate::template::of(backend, &servers).await;
        let db = Self::make(backend, &servers, prefix, pool, false, template.as_deref())
            .await
            .unwrap();
        if template.is_none() {
            db.store.migrate().await.unwrap();
        }
        Some(db)
    }

    /// The default servers once `backend`'s answers; None (skip, saying
    /// why) when it does not and `CI` is unset. In CI an unreachable
    /// server panics, so that a suite never passes by skipping.
    async fn servers(backend: Backend) -> Option<Servers> {
        let servers = Servers::default();
        if let Err(e) = servers.reachable(backend).await {
            if std::env::var_os("CI").is_none() {
                eprintln!("skipping: {backend:?} unreachable: {e}");
                return None;
            }
            panic!("{backend:?} unreachable in CI: {e}");
        }
        Some(servers)
    }

    /// Creates a database with Feed's tables.
    pub async fn migrated(
        backend: Backend,
        servers: &Servers,
        prefix: &str,
        pool: u32,
    ) -> Result<Database> {
        let db = Self::create(backend, servers, prefix, pool).await?;
        if let Err(e) = db.store.migrate().await {
            db.drop_db().await;
            return Err(e.into());
        }
        Ok(db)
    }

    /// Closes the pool and drops the database.
    pub async fn drop_db(self) {
        let _ = self.store.connection().clone().close().await;
        drop_database(self.backend, self.admin.as_deref(), &self.name).await;
    }

    /// Drops the database from synchronous code (a `Drop` inside a
    /// runtime), on a thread with a runtime of its own.
    pub fn drop_blocking(&self) {
        let (backend, admin, name) = (self.backend, self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(drop_database(backend, admin.as_deref(), &name));
        })
        .join();
    }

    /// Runs SQL written with `?` placeholders (numbered for PostgreSQL).
    pub async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64> {
        Ok(self
            .store
            .connection()
            .execute_raw(crate::statement(self.store.driver(), sql, values))
            .await
            .with_context(|| sql.to_string())?
            .rows_affected())
    }

    /// Runs a query written with `?` placeholders.
    pub async fn query(&self, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>> {
        self.store
            .connection()
            .query_all_raw(crate::statement(self.store.driver(), sql, values))
            .await
            .with_context(|| sql.to_string())
    }

    /// The `n` column of a one-row query.
    pub async fn count(&self, sql: &str) -> Result<i64> {
        let rows = self.query(sql, vec![]).await?;
        let row = rows.first().ok_or_else(|| anyhow!("no row from {sql}"))?;
        Ok(row.try_get::<i64>("", "n")?)
    }
}

/// Runs one statement on a connection of its own to `url`.
pub(crate) async fn execute_on(url: &str, sql: &str) -> Result<()> {
    let store = connect(url, 1).await?;
    let done = store.connection().execute_unprepared(sql).await;
    let _ = store.connection().clone().close().await;
    done?;
    Ok(())
}

pub(crate) async fn drop_database(backend: Backend, admin: Option<&str>, name: &str) {
    if backend == Backend::Citus {
        // Each node's copy; the workers' hold the shards.
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        for port in CITUS_NODES {
            if let Err(e) = execute_on(&citus_node(port, "postgres"), &sql).await {
                eprintln!("  warning: could not drop database {name} on port {port}: {e:#}");
            }
        }
        return;
    }
    let Some(admin) = admin else { return };
    let sql = if backend == Backend::Postgres {
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    } else {
        format!("DROP DATABASE IF EXISTS {name}")
    };
    if let Err(e) = execute_on(admin, &sql).await {
        eprintln!("  warning: could not drop database {name}: {e:#}");
    }
}
