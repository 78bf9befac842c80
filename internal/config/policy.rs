//! The retry policy's settings (its behaviour, what an outcome does to
//! an item, is in the crate's `policy` module).

use std::time::Duration;

/// The settings the retry policy reads.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Attempts per step before an item fails; 0 = unlimited.
    pub max_attempts: u32,
    /// "Not done" answers in a row at one gate before an item fails; 0 =
    /// unlimited.
    pub max_steps: u32,
    /// First retry delay.
    pub backoff_base: Duration,
    /// Largest retry delay.
    pub backoff_max: Duration,
}
