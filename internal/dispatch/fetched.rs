//! What a refill task brings back to the dispatch loop.

use tokio::time::Instant;

use crate::Result;
use crate::ids::{PartitionId, SessionId};
use crate::store::{Ask, ReadyItem};

/// What a refill task brings back.
pub(super) enum Fetched {
    /// A look at the items written since the last one: their partitions
    /// and the new mark.
    Discovered {
        me: SessionId,
        /// When the look was sent.
        started: Instant,
        found: Result<(Vec<PartitionId>, i64)>,
    },
    /// Ready items of the partitions asked.
    Items {
        me: SessionId,
        /// What each partition was asked, with its room for new items.
        asks: Vec<(Ask, usize)>,
        want: usize,
        /// When the read was sent.
        started: Instant,
        items: Result<Vec<ReadyItem>>,
    },
}
