//! One login on a connection of its own, before the pool opens: the pool
//! retries a refused connection until its acquire timeout and then says
//! only that it timed out, where one login says why at once.

use sea_orm::sqlx;

use super::Driver;

impl Driver {
    /// Logs in once and closes the connection: Ok(false) when `primary`
    /// was asked for and the server takes no writes (a standby).
    pub(crate) async fn login(self, url: &str, primary: bool) -> Result<bool, sqlx::Error> {
        use sqlx::mysql::MySqlConnectOptions;
        use sqlx::postgres::PgConnectOptions;
        use sqlx::{ConnectOptions as _, Connection as _};
        match self {
            Driver::Postgres => {
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
