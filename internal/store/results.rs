//! Writing handler results: fenced, many per statement (PostgreSQL, SQLite)
//! or per transaction (MySQL/MariaDB), with a row the database refuses
//! isolated from the rest of its batch.

use std::time::Duration;

use sea_orm::DbErr;

use super::{Fence, Store};
use crate::ids::SessionId;
use crate::status::PartitionEnd;
use crate::status::Status;
use crate::{Error, Result};

/// Results per batch statement (thirteen values each: well under every
/// backend's limit on parameters).
const BATCH_ROWS: usize = 256;

/// Longest `last_error` stored, in bytes; longer messages are cut and say so.
pub(super) const MAX_ERROR_BYTES: usize = 8192;

/// The new state of an item after a handler call, written under the fence.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemWrite {
    /// New status.
    pub status: Status,
    /// Next gate.
    pub gate: i64,
    /// New data; None keeps the stored bytes.
    pub data: Option<bytes::Bytes>,
    /// Calls made for the current step.
    pub attempts: i32,
    /// Steps taken at the item's gate (see [`crate::store::Fence::steps`]).
    pub steps: i32,
    /// Why the last call failed, if it did (see [`sanitize_error`]).
    pub last_error: Option<String>,
    /// Retry delay from now (database clock); None = may run at once.
    pub delay: Option<Duration>,
    /// A new step (or a final state) bumps `version`; a failed attempt does
    /// not, so the `Idempotency-Key` (id + version) is stable across retries
    /// of one step. Every write changes `version` or `attempts`, and both are
    /// checked, so a stale writer can never overwrite a newer result.
    pub new_step: bool,
    /// The answer ends the item's partition: written in one transaction
    /// with the result, under the same fence ([`Store::end_partition`]).
    pub ends: Option<PartitionEnd>,
    /// Items the answer spawns into the partition, inserted with the
    /// result under its fence ([`Store::write_spawning`]).
    pub spawned: Option<std::sync::Arc<[super::NewItem]>>,
}

/// One result to write: the fence of the delivered item, the session that
/// delivered it, and the item's new state.
#[derive(Clone, Debug)]
pub(crate) struct Ack {
    /// The item as delivered.
    pub fence: Fence,
    /// The session that held the partition when the item was delivered.
    pub session: SessionId,
    /// The new state.
    pub write: ItemWrite,
}

/// What became of one result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Stored.
    Yes,
    /// Rejected by the fence: the item changed or its partition moved.
    Stale,
    /// The database refused this row (its text says why); nothing was stored.
    Refused(String),
}

/// A message fit for `last_error`: NUL characters (which PostgreSQL
/// refuses in text) replaced, and cut at [`MAX_ERROR_BYTES`] with a note.
pub(crate) fn sanitize_error(message: &str) -> String {
    let clean = message.replace('\0', "\u{FFFD}");
    if clean.len() <= MAX_ERROR_BYTES {
        return clean;
    }
    let mut end = MAX_ERROR_BYTES - 64;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} … [cut: {} bytes in all]", &clean[..end], clean.len())
}

/// Whether the database itself refused a statement (a constraint, a value
/// it cannot store), as opposed to failing to run it (connection, timeout,
/// a conflict to retry, a connection on a server that cannot write): only
/// a refusal may become a failed attempt; the rest is the database's fault.
fn refused(e: &Error) -> bool {
    match e {
        Error::Db(d @ DbErr::Exec(sea_orm::RuntimeErr::SqlxError(s)))
        | Error::Db(d @ DbErr::Query(sea_orm::RuntimeErr::SqlxError(s))) => {
            s.as_database_error().is_some() && !super::is_transient(d)
        }
        _ => false,
    }
}

impl Store {
    /// Writes many results, each with its own fence; per result, whether it
    /// was stored. When the database refuses a batch, its rows are written
    /// one by one so that one bad row costs only itself. Errors that are
    /// not the database's refusal (the connection, after retries) fail the
    /// whole call.
    pub(crate) async fn write_results(
        &self,
        acks: &[Ack],
        expiry: Duration,
    ) -> Result<Vec<Written>> {
        // Rare: results that end a partition or spawn items, each in a
        // transaction of its own; the others still go in batches.
        let special = |a: &Ack| a.write.ends.is_some() || a.write.spawned.is_some();
        if !acks.iter().any(special) {
            return self.write_plain(acks, expiry).await;
        }
        let plain: Vec<Ack> = acks.iter().filter(|a| !special(a)).cloned().collect();
        let mut written = self.write_plain(&plain, expiry).await?.into_iter();
        let mut out = Vec::with_capacity(acks.len());
        for ack in acks {
            out.push(match (ack.write.ends, &ack.write.spawned) {
                (Some(end), _) => self.end_partition(ack, end, expiry).await?,
                (None, Some(items)) => self.write_spawning(ack, items, expiry).await?,
                (None, None) => written.next().unwrap_or(Written::Stale),
            });
        }
        Ok(out)
    }

    /// [`Store::write_results`] of results that end no partition.
    async fn write_plain(&self, acks: &[Ack], expiry: Duration) -> Result<Vec<Written>> {
        let mut out = Vec::with_capacity(acks.len());
        for chunk in acks.chunks(BATCH_ROWS) {
            match self.write_chunk(chunk, expiry).await {
                Ok(written) => out.extend(written.into_iter().map(Written::from)),
                Err(e) if refused(&e) && chunk.len() > 1 => {
                    tracing::warn!(error = %e, rows = chunk.len(), "the database refused a batch of results; writing them one by one");
                    for ack in chunk {
                        out.push(
                            match self.write_chunk(std::slice::from_ref(ack), expiry).await {
                                Ok(w) => Written::from(w[0]),
                                Err(e) if refused(&e) => {
                                    Written::Refused(sanitize_error(&e.to_string()))
                                }
                                Err(e) => return Err(e),
                            },
                        );
                    }
                }
                Err(e) if refused(&e) => out.push(Written::Refused(sanitize_error(&e.to_string()))),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

impl From<bool> for Written {
    fn from(stored: bool) -> Self {
        if stored { Written::Yes } else { Written::Stale }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_made_storable() {
        assert_eq!(sanitize_error("a\0b"), "a\u{FFFD}b");
        let long = "é".repeat(10_000);
        let cut = sanitize_error(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES);
        assert!(cut.ends_with("[cut: 20000 bytes in all]"), "{cut}");
        assert_eq!(sanitize_error("short"), "short");
    }
}
