//! Tests that measure rates over wall-clock windows. Each takes the
//! machine to itself (declared `alone`), and the module's name puts them
//! near the end of the suite's order, so that the tests queued behind one
//! of them are few, not a whole module of heavy ones starting at once.

mod live_limits;
mod rate_limit;
