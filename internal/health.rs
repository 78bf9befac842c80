//! What `/readyz` reports and why dispatch holds off: kept current by the
//! session and dispatch loops, read by the listener, the console and
//! `status`.

use std::sync::atomic::AtomicBool;

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

    pub(crate) fn set_hold(&self, hold: Option<Hold>) {
        *self.hold.lock().expect("hold lock") = hold;
    }
}
