//! What `/readyz` reports and why dispatch holds off: kept current by the
//! session and dispatch loops, read by the listener, the console and
//! `status`.

use std::sync::atomic::AtomicBool;

/// Polls for items that fail in a row before `/readyz` says not ready:
/// one failure is retried after the poll interval, a few in a row are a
/// fault (a row or a table Feed cannot read) that stops dispatch.
pub const POLLING_UNREADY: u32 = 3;

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
    /// Why polling for items fails, while it has failed
    /// [`POLLING_UNREADY`] times in a row or more: `/readyz` says not ready.
    pub(crate) polling: std::sync::Mutex<Option<Hold>>,
    /// Polls for items that failed in a row.
    pub(crate) polling_failures: std::sync::atomic::AtomicU32,
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

    /// Why polling for items keeps failing, if it does.
    pub fn polling(&self) -> Option<Hold> {
        self.polling.lock().expect("polling lock").clone()
    }

    /// Counts a poll for items: `Err` with its reason when it failed. After
    /// [`POLLING_UNREADY`] failures in a row `/readyz` says not ready, with
    /// the last reason, until a poll succeeds.
    pub(crate) fn polled(&self, failed: Option<String>) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut polling = self.polling.lock().expect("polling lock");
        let Some(reason) = failed else {
            self.polling_failures.store(0, Relaxed);
            *polling = None;
            return;
        };
        let n = self.polling_failures.fetch_add(1, Relaxed) + 1;
        if n >= POLLING_UNREADY {
            let since = polling.as_ref().map_or_else(std::time::Instant::now, |h| h.since);
            *polling = Some(Hold { reason, since });
        }
    }

    pub(crate) fn set_hold(&self, hold: Option<Hold>) {
        *self.hold.lock().expect("hold lock") = hold;
    }
}
