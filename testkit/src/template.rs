//! One migrated database per server and test process, that each test's
//! database is copied from, so that no test pays for every migration
//! (about 0.4 s on PostgreSQL and 1.5 s on MariaDB, where a copy takes a
//! tenth of that): PostgreSQL copies it with `CREATE DATABASE … TEMPLATE`;
//! MariaDB has no such thing, so its tables, their rows and its triggers
//! are created again from `SHOW CREATE`. A template is dropped when the
//! process exits, and those left by processes that died are dropped by
//! the next one that makes its own.

use std::sync::Mutex;

use anyhow::{Context, Result};
use sea_orm::ConnectionTrait;

use crate::db::{Backend, Servers, connect, drop_database, execute_on};

/// Each server's template, once made (None when it could not be: each
/// test then migrates its own database).
static POSTGRES: tokio::sync::OnceCell<Option<String>> = tokio::sync::OnceCell::const_new();
static MARIADB: tokio::sync::OnceCell<Option<String>> = tokio::sync::OnceCell::const_new();

/// What to drop at exit: (backend, admin URL, database).
static AT_EXIT: Mutex<Vec<(Backend, String, String)>> = Mutex::new(Vec::new());

/// Names start with this, then the process id.
const PREFIX: &str = "feed_tpl_";

/// This process's migrated template on `backend`'s default server (None
/// for SQLite, or when it could not be made).
pub(crate) async fn of(backend: Backend, servers: &Servers) -> Option<String> {
    let cell = match backend {
        // Citus: migrated per test, so that its tier exercises migrations.
        Backend::Sqlite | Backend::Citus => return None,
        Backend::Postgres => &POSTGRES,
        Backend::Mysql => &MARIADB,
    };
    cell.get_or_init(|| async {
        match make(backend, servers).await {
            Ok(name) => Some(name),
            Err(e) => {
                eprintln!("  warning: no template database ({e:#}); each test migrates its own");
                None
            }
        }
    })
    .await
    .clone()
}

async fn make(backend: Backend, servers: &Servers) -> Result<String> {
    let admin = servers.admin(backend)?.context("no database server")?;
    sweep(backend, &admin).await;
    let name = format!(
        "{PREFIX}{}_{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    execute_on(&admin, &format!("CREATE DATABASE {name}")).await?;
    remember(backend, admin, name.clone());
    let url = servers.url(backend, &name)?.context("no database URL")?;
    // No connection may stay open on it: a template with one cannot be copied.
    let store = connect(&url, 1).await?;
    let migrated = store.migrate().await;
    let _ = store.connection().clone().close().await;
    migrated?;
    Ok(name)
}

/// Drops the templates whose process is gone (killed before its exit ran).
async fn sweep(backend: Backend, admin: &str) {
    let Ok(store) = connect(admin, 1).await else {
        return;
    };
    let sql = match backend {
        Backend::Postgres => {
            format!("SELECT datname AS n FROM pg_database WHERE datname LIKE '{PREFIX}%'")
        }
        _ => format!(
            "SELECT SCHEMA_NAME AS n FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE '{PREFIX}%'"
        ),
    };
    let rows = store
        .connection()
        .query_all_raw(sea_orm::Statement::from_string(store.backend(), sql))
        .await
        .unwrap_or_default();
    let _ = store.connection().clone().close().await;
    for row in rows {
        let Ok(name) = row.try_get::<String>("", "n") else {
            continue;
        };
        let pid = name[PREFIX.len()..].split('_').next().unwrap_or("");
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            drop_database(backend, Some(admin), &name).await;
        }
    }
}

/// Drops `name` when the process exits (the test harness exits through
/// `exit`, which runs `atexit` handlers).
#[allow(unsafe_code)]
fn remember(backend: Backend, admin: String, name: String) {
    let mut list = AT_EXIT.lock().unwrap_or_else(|e| e.into_inner());
    if list.is_empty() {
        // SAFETY: registering a plain `extern "C"` function that takes and
        // returns nothing is all `atexit` asks.
        unsafe {
            libc::atexit(drop_at_exit);
        }
    }
    list.push((backend, admin, name));
}

extern "C" fn drop_at_exit() {
    let list = std::mem::take(&mut *AT_EXIT.lock().unwrap_or_else(|e| e.into_inner()));
    // A runtime of its own, on a thread of its own: the process's are gone.
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        for (backend, admin, name) in list {
            rt.block_on(drop_database(backend, Some(&admin), &name));
        }
    })
    .join();
}

/// Creates database `name` on MariaDB as a copy of `template`: its tables
/// (foreign keys unchecked meanwhile), their rows and its triggers, on one
/// connection.
pub(crate) async fn copy_mysql(admin: &str, template: &str, name: &str) -> Result<()> {
    let store = connect(admin, 1).await?;
    let db = store.connection();
    let run = |sql: String| async move {
        db.execute_unprepared(&sql)
            .await
            .with_context(|| format!("copying the template: {sql:.120}"))
    };
    let text = |rows: Vec<sea_orm::QueryResult>, col: &str| -> Vec<String> {
        rows.iter()
            .filter_map(|r| r.try_get::<String>("", col).ok())
            .collect()
    };
    let query = |sql: String| async move {
        db.query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::MySql,
            sql,
        ))
        .await
        .context("reading the template")
    };
    // Every name is qualified: a pooled connection keeps no `USE`.
    let copied = async {
        run(format!("CREATE DATABASE {name}")).await?;
        let mut tables = text(
            query(format!(
                "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{template}'"
            ))
            .await?,
            "t",
        );
        // Referenced before referencing: feed_items' foreign key needs it.
        tables.sort_by_key(|t| t != "feed_partitions");
        for t in &tables {
            let ddl = text(query(format!("SHOW CREATE TABLE {template}.{t}")).await?, "Create Table");
            let ddl = ddl.into_iter().next().context("no CREATE TABLE")?;
            run(ddl.replacen("CREATE TABLE `", &format!("CREATE TABLE `{name}`.`"), 1)).await?;
            run(format!("INSERT INTO {name}.{t} SELECT * FROM {template}.{t}")).await?;
        }
        let triggers = query(format!("SHOW TRIGGERS FROM {template}")).await?;
        for row in &triggers {
            let trigger: String = row.try_get("", "Trigger")?;
            let table: String = row.try_get("", "Table")?;
            let ddl = text(
                query(format!("SHOW CREATE TRIGGER {template}.{trigger}")).await?,
                "SQL Original Statement",
            );
            let ddl = ddl.into_iter().next().context("no CREATE TRIGGER")?;
            let ddl = ddl
                .replacen(&format!(" {trigger} "), &format!(" {name}.{trigger} "), 1)
                .replacen(&format!(" ON {table} "), &format!(" ON {name}.{table} "), 1);
            run(ddl).await?;
        }
        anyhow::Ok(())
    }
    .await;
    if copied.is_err() {
        let _ = run(format!("DROP DATABASE IF EXISTS {name}")).await;
    }
    let _ = db.clone().close().await;
    copied
}
