//! What connecting needs to know of each database: the URL schemes it
//! answers to, whether it is embedded, whether a URL may name several
//! hosts or sit behind a transaction pooler, how to create a missing
//! database, and one login before the pool opens (the pool retries a
//! refused connection until its acquire timeout and then says only that
//! it timed out, where one login says why at once).

use sea_orm::sqlx;

use super::Driver;

impl Driver {
    /// The driver for a database URL by its scheme, with the URL as the
    /// connection pool takes it; None for a scheme Feed does not know.
    pub(crate) fn from_url(url: &str) -> Option<(String, Driver)> {
        Some(match url.split(':').next().unwrap_or_default() {
            "sqlite" => (url.to_string(), Driver::Sqlite),
            "postgres" | "postgresql" => (url.to_string(), Driver::Postgres),
            "mysql" => (url.to_string(), Driver::MySql),
            "mariadb" => (url.replacen("mariadb", "mysql", 1), Driver::MySql),
            _ => return None,
        })
    }

    /// What the database is called in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Driver::Sqlite => "SQLite",
            Driver::Postgres | Driver::Citus => "PostgreSQL",
            Driver::MySql => "MySQL/MariaDB",
        }
    }

    /// See [`Dialect::embedded`].
    pub(crate) fn embedded(self) -> bool {
        self.dialect().embedded
    }

    /// See [`Dialect::several_hosts`].
    pub(crate) fn several_hosts(self) -> bool {
        self.dialect().several_hosts
    }

    /// See [`Dialect::transaction_pooler`].
    pub(crate) fn transaction_pooler(self) -> bool {
        self.dialect().transaction_pooler
    }

    /// See [`Dialect::create_database`].
    pub(crate) fn create_database(
        self,
        host: &str,
        port: &str,
        user: &str,
        name: &str,
        password: bool,
    ) -> String {
        (self.dialect().create_database)(host, port, user, name, password)
    }

    /// Logs in once and closes the connection: Ok(false) when `primary`
    /// was asked for and the server takes no writes (a standby).
    pub(crate) async fn login(self, url: &str, primary: bool) -> Result<bool, sqlx::Error> {
        use sqlx::mysql::MySqlConnectOptions;
        use sqlx::postgres::PgConnectOptions;
        use sqlx::{ConnectOptions as _, Connection as _};
        match self {
            Driver::Postgres | Driver::Citus => {
                let opts: PgConnectOptions = url.parse()?;
                let mut conn = opts.application_name("feed-processor").connect().await?;
                let writes = !primary || crate::store::role::writable(&mut conn).await?;
                conn.close().await?;
                Ok(writes)
            }
            Driver::MySql => {
                url.parse::<MySqlConnectOptions>()?
                    .connect()
                    .await?
                    .close()
                    .await?;
                Ok(true)
            }
            Driver::Sqlite => Ok(true),
        }
    }
}

/// `createdb` (PostgreSQL's; SQLite creates its file instead). A password
/// comes from `PGPASSWORD` or `~/.pgpass`, or `createdb` asks for it.
pub(super) fn createdb(host: &str, port: &str, user: &str, name: &str, _password: bool) -> String {
    let user = user_flag("-U", user);
    format!(
        "create it with `createdb -h {host} -p {port}{user} {name}` (or `CREATE DATABASE {name};` in psql)"
    )
}

/// A client's user flag and the user, or nothing without one.
pub(super) fn user_flag(flag: &str, user: &str) -> String {
    if user.is_empty() {
        String::new()
    } else {
        format!(" {flag} {user}")
    }
}
