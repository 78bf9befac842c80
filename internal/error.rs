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
        /// Why: refused, no answer, or the driver's words.
        reason: crate::store::Unreachable,
    },
    /// The database cannot be used as `--database-url` says, and waiting
    /// will not change that (no such database, a refused login, an SQLite
    /// file that cannot be opened); the message says what to do.
    #[error(transparent)]
    Unusable(#[from] crate::store::Unusable),
    /// The database lacks Feed's schema, or part of it: a command that
    /// only reads does not migrate, and says to run `processor migrate`.
    #[error(transparent)]
    Schema(#[from] crate::store::SchemaError),
    /// A database call got no answer within `--statement-timeout` (a dead
    /// connection, or a database that stopped answering); a later call, on
    /// another connection, may succeed.
    #[error("the database did not answer within {0:?} (statement timeout)")]
    StatementTimeout(std::time::Duration),
    /// The database's server takes no writes (a standby, a demoted
    /// primary, a read-only replica): the connection is on the wrong node;
    /// a later call, once the primary is reachable, may succeed.
    #[error(
        "the database server takes no writes (a standby or a demoted primary, read-only); waiting for the primary"
    )]
    WrongNode,
    /// PostgreSQL lost a prepared statement between two steps of one
    /// statement: the connection goes through a pooler in transaction mode
    /// that Feed was not told about.
    #[error(
        "the database lost a prepared statement: Feed is talking to PostgreSQL through a pooler in \
         transaction mode (PgBouncer pool_mode = transaction); start Feed with --db-pooler \
         transaction, or put the pooler in session mode ({0})"
    )]
    TransactionPooler(String),
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
    /// The caller's token no longer counts: a producer token revoked
    /// while its request was under way; nothing was written.
    #[error("{0}")]
    Unauthorized(String),
    /// Something the user asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// An operator action that does not apply to the current state (e.g.
    /// advancing a partition that is not manual); the message says why.
    #[error("{0}")]
    Conflict(String),
    /// Not ready to serve yet (the schema is still being migrated); the
    /// same request will succeed later.
    #[error("{0}")]
    Unavailable(String),
    /// The HTTP listener could not be started.
    #[error("cannot listen on {addr}: {error}{hint}")]
    Listen {
        /// The address from `--listen`.
        addr: String,
        /// Why binding failed (said here only, not as a source, so that
        /// a report of the error chain says it once).
        error: std::io::Error,
        /// What to do about it, starting with "; ".
        hint: &'static str,
    },
    /// A task of the processor panicked; the processor stopped.
    #[error("the {task} task panicked ({message}); the processor stopped (see the log above)")]
    Panicked {
        /// The task's name.
        task: &'static str,
        /// The panic's message.
        message: String,
    },
}

/// `Result` with Feed's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
