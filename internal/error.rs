//! The library's one error type: what went wrong and, where it helps, what to do.

/// Errors returned by Feed's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database refused or failed a statement.
    #[error("database error: {0}")]
    Db(#[from] sea_orm::DbErr),
    /// The database URL is not one Feed can use.
    #[error("invalid database URL: {0}")]
    DatabaseUrl(String),
    /// The database could not be reached (it may come up later).
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL with its password redacted.
        url: String,
        /// The driver's message.
        reason: String,
    },
    /// A database call got no answer within `--statement-timeout` (a dead
    /// connection, or a database that stopped answering); a later call, on
    /// another connection, may succeed.
    #[error("the database did not answer within {0:?} (statement timeout)")]
    StatementTimeout(std::time::Duration),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Input from a producer or the command line was rejected; nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// The caller's token does not allow this (a producer token outside
    /// its scope); nothing was written.
    #[error("{0}")]
    Forbidden(String),
    /// Something the user asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// An operator action that does not apply to the current state (e.g.
    /// advancing a partition that is not manual); the message says why.
    #[error("{0}")]
    Conflict(String),
    /// The HTTP listener could not be started.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address from `--listen`.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
}

/// `Result` with Feed's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
