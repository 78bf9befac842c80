//! The database flags every command shares, how a command opens the
//! database (creating it or not), and `migrate`.

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::{LOGS, LogFormat, duration, init_logs, secret};

#[derive(Args, Clone)]
#[command(next_help_heading = "Database")]
pub struct DbArgs {
    /// Database URL: sqlite://PATH?mode=rwc, postgres://… or mysql://…
    #[arg(
        long,
        env = "FEED_DATABASE_URL",
        default_value = feed::Config::DATABASE_URL,
        hide_env_values = true
    )]
    pub database_url: String,
    /// Read the database URL from this file (trailing newline ignored): a URL with a password
    /// then shows in neither the process list nor the environment [default: none]
    #[arg(
        long,
        env = "FEED_DATABASE_URL_FILE",
        value_parser = secret::read_file,
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<String>,
    /// What stands between Feed and PostgreSQL: none (the server or a TCP proxy such as HAProxy),
    /// session (a pooler in session mode), or transaction (PgBouncer pool_mode = transaction:
    /// each statement in its own transaction, no LISTEN)
    #[arg(long, env = "FEED_DB_POOLER", value_enum, default_value = "none")]
    pub db_pooler: PoolerArg,
    /// A database connection older than this is closed when it goes back to the pool: the
    /// backstop that moves connections off a node that changed role without closing them
    #[arg(long, env = "FEED_DB_MAX_LIFETIME", default_value = "30m", value_parser = duration)]
    pub db_max_lifetime: humantime::Duration,
}

/// `--db-pooler`.
#[derive(Clone, Copy, ValueEnum)]
pub enum PoolerArg {
    None,
    Session,
    Transaction,
}

impl From<PoolerArg> for feed::store::Pooler {
    fn from(p: PoolerArg) -> Self {
        match p {
            PoolerArg::None => Self::None,
            PoolerArg::Session => Self::Session,
            PoolerArg::Transaction => Self::Transaction,
        }
    }
}

impl DbArgs {
    /// The database URL, from whichever flag was given.
    pub fn url(&self) -> String {
        self.database_url_file
            .clone()
            .unwrap_or_else(|| self.database_url.clone())
    }

    /// The store's settings for a command's pool of `max_connections`.
    pub fn options(&self, max_connections: u32) -> feed::store::Options {
        let mut o = feed::store::Options::new(max_connections);
        o.pooler = self.db_pooler.into();
        o.max_lifetime = self.db_max_lifetime.into();
        o
    }
}

/// Opens the database of a command that reads or changes what is there:
/// an SQLite file that does not exist is an error, not a new empty
/// database, and the schema is checked, never changed (a database without
/// Feed's schema, or with migrations pending, is an error saying to run
/// `processor migrate`). Says on stderr which database it opened.
pub async fn connect(db: &DbArgs) -> anyhow::Result<feed::Store> {
    let url = db.url();
    let store = feed::Store::open_existing(&url, &db.options(4)).await?;
    opened(&url);
    store.check_schema().await?;
    Ok(store)
}

/// Opens the database of a command that may be the first on a new one
/// (`migrate`, `enqueue`, `ui`, `limits set`): a `mode=rwc` SQLite file is
/// created and the pending migrations are applied.
pub async fn create(db: &DbArgs) -> anyhow::Result<feed::Store> {
    let url = db.url();
    let store = feed::Store::open(&url, &db.options(4)).await?;
    opened(&url);
    store.migrate().await.context("applying migrations")?;
    Ok(store)
}

/// Says which database this is (on stderr, so that `--json` output stays
/// JSON).
fn opened(url: &str) {
    eprintln!("database: {}", feed::store::shown(url));
}

pub async fn migrate(db: DbArgs) -> anyhow::Result<()> {
    init_logs(LogFormat::Text, LOGS);
    create(&db).await?;
    println!("migrations applied");
    Ok(())
}
