//! Feed: a partition processor on a relational database.
//!
//! Producers write partitions and items; a processor leases partitions,
//! delivers each item at its partition's gate to a handler, stores the
//! answer `{gate, done, data}`, advances the gate when the gate runs dry
//! (fan-in) and closes the partition when everything is done.
//!
//! The public API: [`Store`] (connecting, migrating, producer operations,
//! operator controls and read models), [`Config`], [`run`](run()) and
//! [`run_with`], the [`Handler`] trait with [`Job`] and [`Outcome`], and
//! these modules:
//! - [`store`]: all SQL (backend differences in one driver per database) and the types its operations take and return;
//! - [`handler`]: the [`Handler`] trait and the HTTP handler protocol (signatures included);
//! - [`run`](mod@run): start-up and graceful shutdown;
//! - [`console`]: the web dashboard and its JSON API (operator controls);
//! - [`lines`]: the JSON-lines item format of `processor enqueue`;
//! - [`schedule`]: scheduled items' `not_before` and `delay` as producers write them;
//! - [`inputs`]: a fan-in item's inputs, the URL in `Feed-Inputs` and the listener's route behind it;
//! - [`demo`]: the resume example behind `processor demo`;
//! - [`config`], [`error`]: settings and the error type.
//!
//! Inside the crate, by what they own (docs/design.md explains how they fit):
//! `context` (what the tasks of a running processor share, and the session
//! cell), `session` (the session row and heartbeat), `leases` (leasing,
//! balancing and stealing partitions), `dispatch` (the poll/deliver/acknowledge
//! loop, with a prefetch buffer), `notify` (PostgreSQL LISTEN/NOTIFY wake-ups),
//! `completer` (batched, fenced result writes), `policy` (what an outcome does
//! to an item: retries, backoff, failure), `rotation` (the round-robin order
//! of partitions with ready work), `gates` (fan-in: advancing, closing and
//! failing partitions), `server` and `metrics` (health and Prometheus
//! metrics), `retention` (pruning finished partitions, one processor at a
//! time), `backlog` (the fleet's backlog gauges, counted by one processor
//! at a time), `backoff` (retry delays), `recent` (the last five minutes of handler calls
//! and queue waits, written with the heartbeat for the fleet's figures), `ratelog` (a lasting fault logged at
//! a bounded rate), `validate` (what every entrance accepts: ids, gates,
//! filters, traceparents), `rate` (a rate as users write it, below the
//! config, the store and the limiter), `printable` (text made safe to
//! print), `otel` (OpenTelemetry traces, off unless the standard
//! variables name an endpoint) and `logs` (the filters that keep every
//! log event from being lost to another library's checks).

#![deny(missing_docs)]
// An item is `pub` only where it is part of the API: what nothing outside
// the crate can reach says so (`pub(crate)`), held by the compiler.
#![deny(unreachable_pub)]
// A panic in a task is caught and logged, but an item must never be lost
// to one: outside tests every fallible step says what went wrong.
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub(crate) mod backlog;
pub(crate) mod backoff;
pub(crate) mod breaker;
pub(crate) mod client;
pub(crate) mod completer;
pub mod config;
pub(crate) mod conns;
pub mod console;
pub(crate) mod context;
pub mod demo;
pub(crate) mod dispatch;
pub mod error;
pub(crate) mod gates;
pub mod handler;
pub mod health;
pub mod ids;
pub mod inputs;
pub(crate) mod leases;
pub mod limits;
pub mod lines;
pub mod logs;
pub(crate) mod metrics;
pub(crate) mod notify;
pub mod otel;
pub(crate) mod policy;
pub mod printable;
pub mod rate;
pub(crate) mod ratelog;
pub mod recent;
pub mod recurring;
pub mod reference;
pub(crate) mod retention;
pub(crate) mod rotation;
pub mod run;
pub mod schedule;
pub mod server;
pub(crate) mod session;
pub mod status;
pub mod store;
pub(crate) mod tasks;
pub mod validate;
pub(crate) mod webhooks;
pub(crate) mod write_idle;

pub use config::{Clock, Config};
pub use error::{Error, Result};
pub use handler::{Child, Handler, HttpHandler, Job, Outcome, PartitionEnd};
pub use run::{run, run_with};
pub use store::Store;
