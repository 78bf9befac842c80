//! The table of SQL and behaviour that one database has its own
//! (`Dialect`, filled in by each driver's file) and how producer tokens
//! are locked on it (`TokenLocks`).

use sea_orm::Value;

use super::Sql;

/// Appends a delete of a page's finished items: the statement, the
/// partitions' ids, the partition test, the most rows.
type ItemDelete = fn(&mut Sql, Vec<Value>, &dyn Fn(&mut Sql), i64);

/// One driver's SQL and behaviour: everything Feed writes differently for
/// one database.
pub(crate) struct Dialect {
    /// The database clock as integer epoch milliseconds. Every time
    /// comparison goes through this, never through a processor's clock.
    pub(super) now: &'static str,
    /// Placeholders are numbered (`$1, $2, …`) rather than `?`.
    pub(super) numbered: bool,
    /// `data` as bytes, for an item aliased by the argument.
    pub(super) data_column: fn(&str) -> String,
    /// What goes around a `SELECT … ORDER BY … LIMIT` to make it one
    /// branch (numbered by the argument) of a `UNION ALL`.
    pub(super) limited_branch: fn(usize) -> (&'static str, String),
    /// How the right side of `(id, version) IN …` is written: the list's
    /// opening, then the casts after each row's id and version (a text and
    /// a bigint). Each row's pair is looked up, where a `CASE id WHEN …
    /// THEN …` compared it with half the list on average (a quarter of the
    /// cost of closing 500 partitions at once).
    pub(super) id_version_pairs: (&'static str, &'static str, &'static str),
    /// The column that orders a partition's items as they were written.
    pub(crate) seq: &'static str,
    /// A condition on the items a look for new work reads, where the index
    /// in write order holds only those (PostgreSQL: available items).
    pub(crate) new_work: Option<&'static str>,
    /// Appended to an `INSERT` of a partition so that an existing one stays
    /// (producers creating the same partition at once all succeed); the
    /// statement affects exactly 1 row only when it created the partition.
    pub(crate) keep_existing: &'static str,
    /// Appended to an `INSERT INTO feed_completions (minute, items)` so
    /// that the minute's existing row is added to.
    pub(crate) add_to_minute: &'static str,
    /// Opens a comparison of the first characters of `id` with a prefix,
    /// byte for byte: the count of characters and the prefix follow.
    pub(super) id_starts: &'static str,
    /// Appended to a sub-select of a result write so that the fence holds
    /// at commit.
    pub(super) fence_lock: &'static str,
    /// A row lock taken by a `SELECT` inside a transaction.
    pub(crate) for_update: &'static str,
    /// The locks that order producer tokens' revokes and creations with
    /// the enqueues of scoped producers.
    pub(crate) token_locks: TokenLocks,
    /// The statement that wakes LISTENing processors, where there is one.
    pub(crate) notify: Option<&'static str>,
    /// SQL expressions joined into one string.
    pub(super) concat: fn(&[&str]) -> String,
    /// Writes from many connections run at once (SQLite has one writer
    /// at a time, so more only wait on its lock).
    pub(super) concurrent_writes: bool,
    /// The database is a file this process opens (SQLite): no login, no
    /// network, and a URL that is a path rather than an address.
    pub(super) embedded: bool,
    /// A URL may name several hosts, and Feed follows them to the one that
    /// writes (PostgreSQL); elsewhere a URL names one host.
    pub(super) several_hosts: bool,
    /// It may sit behind a pooler in transaction mode (PostgreSQL).
    pub(super) transaction_pooler: bool,
    /// Run first, in the same transaction, before a large read that keeps
    /// its shape from call to call, so that it is planned once per
    /// connection (see `Store::fetch_planned_once`).
    pub(crate) plan_once: Option<&'static str>,
    /// How to create a missing database, said as a hint: from the host,
    /// the port, the user (may be empty), the name and whether the URL
    /// has a password (a client asked for one then prompts).
    pub(super) create_database: fn(&str, &str, &str, &str, bool) -> String,
    /// Appends a delete of up to the batch of items of the partitions
    /// (ids) that are not `available` and whose partition (aliased `p`)
    /// passes the test the last argument appends.
    pub(super) item_delete: ItemDelete,
    /// Counts Feed's tables whose planner statistics lag far behind their
    /// rows, where the database keeps such counts: written in the
    /// driver's own placeholders, the least change first, the factor second.
    pub(super) stale_statistics: Option<&'static str>,
    /// Whether the server runs without autovacuum, where it has one.
    pub(super) autovacuum_off: Option<&'static str>,
    /// Follows `FROM feed_items <alias>` in a read of one partition's items
    /// by status (a probe, a refill) to hold it to `feed_items_ready`.
    pub(crate) ready_index: &'static str,
    /// The planner takes `not_before IS NULL` as fixing the column, so the
    /// dispatch index gives write order after it (MariaDB and SQLite; on
    /// PostgreSQL the order must name `not_before` first, or it sorts).
    pub(super) null_fixes_order: bool,
    /// The `ORDER BY` list that reads the partitions of one status with no
    /// owner in id order, along `feed_partitions_held (status, owner, id)`.
    pub(crate) unowned_order: &'static str,
    /// Appended to an `INSERT` so that a row with the same key (the
    /// column named) gets the inserted values of the columns listed
    /// instead; with none listed the existing row stays as it is.
    pub(super) upsert: fn(&str, &[&str]) -> String,
}

/// How producer tokens are locked (see `store::tokens`): a revoke that
/// has answered is never followed by a commit of an enqueue of the token,
/// and a token's creation and the scoped enqueues under way see each other
/// (a creation waits for them, or they for it), as do two creations.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenLocks {
    /// Appended to a scoped enqueue's read of its own token's row: a
    /// shared lock, which a revoke's `DELETE` of the row waits for.
    pub(crate) own: &'static str,
    /// Appended to a scoped enqueue's read of every token, where a
    /// creation's locking read is what orders the two: a shared lock on
    /// the rows (and gaps) read.
    pub(crate) every: &'static str,
    /// What a creation runs first, where a table lock orders it: a lock
    /// that waits for the enqueues holding their token's row lock, and
    /// holds off new ones and other creations until it commits.
    pub(crate) create: Option<&'static str>,
    /// The isolation a creation runs at, under which its read of every
    /// token `FOR UPDATE` also locks the gaps between them, so that no
    /// token is inserted before it commits (whatever the server's default).
    pub(crate) isolation: Option<sea_orm::IsolationLevel>,
}
