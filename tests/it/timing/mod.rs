//! Tests that measure rates or shares over wall-clock time, or bound
//! statements tightly. Each takes the
//! machine to itself (declared `alone`), and the module's name puts them
//! near the end of the suite's order, so that the tests queued behind one
//! of them are few, not a whole module of heavy ones starting at once.

mod live_limits;
mod queue_wait;
mod rate_limit;
mod statement_timeout;
mod tenant_rates;
mod tenant_share;
