//! Feed's test kit, shared by the integration tests and the benchmark:
//! a fresh database per backend ([`db`]), a real HTTP handler that records
//! every call ([`handler`]), the `processor` binary as a child process
//! ([`process`]), Feed run in process with a movable clock ([`scene`]),
//! `/metrics` parsing ([`metrics`]), statistics
//! ([`stats`]) and test SQL for every backend ([`sql`]). Dev-only: nothing here ships.

#![deny(unreachable_pub)]

pub mod db;
pub mod handler;
pub mod metrics;
pub mod process;
pub mod scene;
pub mod sql;
pub mod stats;
mod template;

pub use db::{Backend, Database, Servers};
pub use handler::{Call, Handler, json, signed, signed_event};
pub use metrics::{Outcomes, metric};
pub use process::{Process, Reserved, free_port};
pub use scene::{Node, Scene};
pub use sql::statement;
pub use stats::{Stats, percentile};
