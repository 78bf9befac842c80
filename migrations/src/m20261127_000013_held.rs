//! `feed_processors.held_reason` and `held_since`: why a processor's
//! dispatch holds off (the handler not there, the circuit breaker open)
//! and since when (epoch ms, database clock), NULL while it dispatches.
//! Written with each heartbeat, so that `processor status`, the API and
//! the console say what a processor that sends nothing is waiting for.

const COLUMNS: [crate::Column; 2] = [
    ("feed_processors", "held_reason", "TEXT NULL"),
    ("feed_processors", "held_since", "BIGINT NULL"),
];

crate::columns_migration!(COLUMNS);
