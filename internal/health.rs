//! What `/readyz` reports and why dispatch holds off: kept current by the
//! session and dispatch loops, read by the listener, the console and
//! `status`.

use std::sync::atomic::AtomicBool;

/// Polls for items that fail in a row before `/readyz` says not ready:
/// one failure is retried after the poll interval, a few in a row are a
/// fault (a row or a table Feed cannot read) that stops dispatch.
pub const POLLING_UNREADY: u32 = 3;

/// A kind of poll for items, counted apart by [`Health::polled`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Poll {
    /// The look for new items.
    Discover = 0,
    /// A read of ready items.
    Items = 1,
}

/// What `/readyz` reports, kept current by the session and dispatch loops.
#[derive(Debug, Default)]
pub struct Health {
    /// The last statement reached the database.
    pub database: AtomicBool,
    /// The schema is there: migrations are applied (or not asked for).
    /// Until then the console answers 503.
    pub schema: AtomicBool,
    /// The session is live (heartbeat within the expiry).
    pub session: AtomicBool,
    /// The last delivery reached the handler.
    pub handler: AtomicBool,
    /// The circuit breaker is open: most calls failed as an outage.
    pub breaker_open: AtomicBool,
    /// Dispatch has held off for longer than the session expiry: the
    /// partitions are given back, and none is taken but one at a time to
    /// probe the handler with.
    pub releasing: AtomicBool,
    /// The last heartbeat reached a server that takes no writes (a
    /// standby, a demoted primary): the database is there, its primary
    /// is not.
    pub not_primary: AtomicBool,
    /// Why dispatch holds off for the handler, while it does: written
    /// with each heartbeat so that `status` and the console show it.
    pub hold: std::sync::Mutex<Option<Hold>>,
    /// Why dispatch holds off for the database (results it does not
    /// take), while it does.
    pub db_hold: std::sync::Mutex<Option<Hold>>,
    /// Polls for items that failed in a row, and why the last one did:
    /// the look for new items and the reads of ready items, apart (one
    /// may fail while the other succeeds).
    pub(crate) polling: std::sync::Mutex<[(u32, Option<Hold>); 2]>,
    /// Results whose write failed on the database and is being tried
    /// again: dispatch starts no call while there are any.
    pub(crate) writes_waiting: std::sync::atomic::AtomicUsize,
    /// The log of results that could not be written.
    pub(crate) unwritten: crate::ratelog::Every,
}

/// Why dispatch holds off (the handler unreachable, the breaker open), and since when.
#[derive(Clone, Debug)]
pub struct Hold {
    /// The handler's URL (credentials redacted) and the last error.
    pub reason: String,
    /// When it began.
    pub since: std::time::Instant,
}

impl Health {
    /// Why dispatch holds off now (the database first); None when it does not.
    pub fn hold(&self) -> Option<Hold> {
        let db = self.db_hold.lock().expect("hold lock").clone();
        db.or_else(|| self.hold.lock().expect("hold lock").clone())
    }

    /// Why polling for items keeps failing ([`POLLING_UNREADY`] failures
    /// in a row or more), if it does.
    pub fn polling(&self) -> Option<Hold> {
        let polling = self.polling.lock().expect("polling lock");
        polling
            .iter()
            .find(|(n, _)| *n >= POLLING_UNREADY)
            .and_then(|(_, h)| h.clone())
    }

    /// Counts a poll of `kind`, with the reason when it failed: a success
    /// starts the count again.
    pub(crate) fn polled(&self, kind: Poll, failed: Option<String>) {
        let mut polling = self.polling.lock().expect("polling lock");
        let (n, hold) = &mut polling[kind as usize];
        match failed {
            None => (*n, *hold) = (0, None),
            Some(reason) => {
                *n += 1;
                let since = hold
                    .as_ref()
                    .map_or_else(std::time::Instant::now, |h| h.since);
                *hold = Some(Hold { reason, since });
            }
        }
    }

    pub(crate) fn set_hold(&self, hold: Option<Hold>) {
        *self.hold.lock().expect("hold lock") = hold;
    }
}
