//! Feed: a partition processor on a relational database.
//!
//! Producers write partitions and items; a processor leases partitions,
//! delivers each item at its partition's gate to a handler, stores the
//! answer `{gate, done, data}`, advances the gate when the gate runs dry
//! (fan-in) and closes the partition when everything is done.
//!
//! Modules, by what they own (docs/design.md explains how they fit):
//! - [`store`]: all SQL (one place per dialect difference) and producer operations;
//! - [`context`]: what the tasks of a running processor share (and the session cell);
//! - [`session`]: the processor's session row and heartbeat;
//! - [`leases`]: leasing, balancing and stealing partitions;
//! - [`dispatch`]: the poll/deliver/acknowledge loop, with a prefetch buffer;
//! - [`notify`]: PostgreSQL LISTEN/NOTIFY wake-ups for new work;
//! - [`completer`]: batched, fenced result writes;
//! - [`policy`]: what an outcome does to an item (retries, backoff, failure);
//! - [`rotation`]: the round-robin order of partitions with ready work;
//! - [`gates`]: fan-in: advancing, closing and failing partitions;
//! - [`handler`]: the [`Handler`] trait and the HTTP handler protocol;
//! - [`server`] and [`metrics`]: health and Prometheus metrics;
//! - [`run`](mod@run): start-up and graceful shutdown;
//! - [`lines`]: the JSON-lines item format of `processor enqueue`;
//! - [`demo`]: the resume example behind `processor demo`;
//! - [`console`]: the web dashboard and its JSON API (operator controls);
//! - [`retention`]: pruning finished partitions, one processor at a time;
//! - [`config`], [`error`], [`backoff`]: settings, the error type, retry delays.

pub mod backoff;
pub mod completer;
pub mod config;
pub mod console;
pub mod context;
pub mod demo;
pub mod dispatch;
pub mod error;
pub mod gates;
pub mod handler;
pub mod leases;
pub mod lines;
pub mod metrics;
pub mod notify;
pub mod policy;
pub mod retention;
pub mod rotation;
pub mod run;
pub mod server;
pub mod session;
pub mod store;

pub use config::Config;
pub use error::{Error, Result};
pub use handler::{Handler, HttpHandler, Job, Outcome};
pub use run::{run, run_with};
pub use store::Store;
