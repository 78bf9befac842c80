//! A partition's items streamed as JSON lines within a budget of bytes:
//! `items.ndjson` (an export) and a fan-in handler's inputs (`inputs`)
//! both send their pages this way, and share one budget per listener.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::export::{Export, ExportedItem, Planned};

/// Bytes of exported items a listener holds at once, over all its
/// exports and inputs: 64 MiB. A page takes its share before it is read,
/// and a slow reader's page keeps it until its last line is written to
/// the socket; the next page of a stream waits for room.
pub const EXPORT_BUDGET_BYTES: usize = 64 << 20;

/// The export budget counts in KiB (a semaphore counts in `u32`).
const UNIT: usize = 1 << 10;

/// The export budget, as a semaphore of [`UNIT`]s.
pub(crate) fn export_budget() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(EXPORT_BUDGET_BYTES / UNIT))
}

/// A page's share of the budget: its data twice (the items read and the
/// lines made of them) and a little per item, at most the whole budget.
fn units(plan: &Planned) -> u32 {
    let bytes = 2 * plan.bytes + 512 * plan.items;
    let units = bytes.div_ceil(UNIT).clamp(1, EXPORT_BUDGET_BYTES / UNIT);
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// Small lines are sent together up to this size; a larger line alone.
const FRAME_BYTES: usize = 64 << 10;

/// How an item is written as a line (without its newline).
pub(crate) type Line = fn(&ExportedItem) -> String;

/// `export`'s items as a streamed body of lines made by `line`, its
/// pages read within `budget`; `first` is its first page, planned
/// before answering (so that an unknown partition can be a 404).
pub(crate) fn lines(
    export: Export,
    first: Option<Planned>,
    budget: Arc<Semaphore>,
    line: Line,
) -> Body {
    let sending = Sending {
        export,
        budget,
        first,
        line,
        page: Vec::new().into_iter(),
        room: None,
        failed: false,
    };
    Body::from_stream(futures_util::stream::unfold(sending, Sending::next))
}

/// Lines of items, holding their page's share of the budget until they
/// are written.
struct Lines {
    text: String,
    _room: Arc<OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Lines {
    fn as_ref(&self) -> &[u8] {
        self.text.as_bytes()
    }
}

/// A stream being sent: the page in hand and its share of the budget.
struct Sending {
    export: Export,
    budget: Arc<Semaphore>,
    /// The first page, planned before answering.
    first: Option<Planned>,
    line: Line,
    page: std::vec::IntoIter<ExportedItem>,
    room: Option<Arc<OwnedSemaphorePermit>>,
    failed: bool,
}

impl Sending {
    /// The next lines (up to [`FRAME_BYTES`], or one larger line: a page
    /// is never one string); reads the next page when this one is sent,
    /// once there is room.
    async fn next(mut self) -> Option<(crate::Result<Bytes>, Sending)> {
        loop {
            if self.failed {
                return None;
            }
            let mut text = String::new();
            // Small lines go out together, up to a frame of 64 KiB.
            while text.len() < FRAME_BYTES {
                let Some(item) = self.page.next() else { break };
                text.push_str(&(self.line)(&item));
                text.push('\n');
            }
            if !text.is_empty() {
                let room = self.room.clone().expect("a page in hand has its room");
                let lines = Lines { text, _room: room };
                return Some((Ok(Bytes::from_owner(lines)), self));
            }
            self.room = None;
            match self.read().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "a stream of items was cut short");
                    self.failed = true;
                    return Some((Err(e), self));
                }
            }
        }
    }

    /// Reads the next page into hand; false after the last.
    async fn read(&mut self) -> crate::Result<bool> {
        let plan = match self.first.take() {
            Some(p) => p,
            None => match self.export.plan().await? {
                Some(p) => p,
                None => return Ok(false),
            },
        };
        let room = self
            .budget
            .clone()
            .acquire_many_owned(units(&plan))
            .await
            .expect("the export budget is never closed");
        self.page = self.export.fetch(plan).await?.into_iter();
        self.room = Some(Arc::new(room));
        Ok(true)
    }
}
