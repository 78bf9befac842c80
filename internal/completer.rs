//! Batches result writes, as River's completer does: deliveries hand their
//! results here, and whatever has queued up while the previous batch was
//! being written goes to the database as one batch. Under load that is
//! one commit per batch instead of one per item; when idle a result is
//! written at once, with no added latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::status::Status;
use crate::store::{Ack, ItemWrite, Store, Written};
use crate::tasks::Tasks;

/// Most results written in one batch.
const MAX_BATCH: usize = 256;

/// A batch takes no more results once their data reaches this size, and
/// such a batch is written while the other workers wait: each result's
/// data is copied several times on its way into the database, so large
/// answers are written one batch at a time and memory stays near the
/// response budget.
const MAX_BATCH_BYTES: usize = 8 << 20;

/// Batches in the database at once for single items: two, so that while
/// one is written the results coming in form the next. One at a time (a
/// pure group commit) made fewer, larger statements and drained 100
/// partitions of 1,000 items a little faster on PostgreSQL, but 100,000
/// one-item partitions at half the rate, with twice the database's CPU
/// per item (paired drains: 3,244-3,294 against 5,798-6,760 items/s).
const WRITERS: usize = 2;

/// Batches in the database at once when the handler answers batches, on a
/// server database: results then come a hundred at a time, and four
/// writers keep the server's cores busy where two left them waiting on
/// commits (`--batch-size 100`: PostgreSQL 1.09x and 1.21x in two
/// sittings, MariaDB 1.27x; medians of three paired drains). SQLite has
/// one writer at a time, so more only wait on its lock.
const BATCH_WRITERS: usize = 4;

/// A formed batch waits at most this long for a writer's turn; then it is
/// written beside the slow one, so that one statement stuck on a lock or a
/// dead connection does not hold every result back.
const SLOW_WRITE: Duration = Duration::from_millis(50);

/// How many batches are in the database at once, for `batch_size` on a
/// database that takes `concurrent` writes (see
/// `Driver::concurrent_writes`). One more worker than that runs: it forms
/// the next batch while they write.
fn writers(batch_size: usize, concurrent: bool) -> usize {
    if batch_size > 1 && concurrent {
        BATCH_WRITERS
    } else {
        WRITERS
    }
}

/// Completed items are added to the overview's per-minute count this often:
/// one statement a second, not one per batch on the same row (a hot row
/// every worker of every processor would queue on).
const COUNT_EVERY: Duration = Duration::from_secs(1);

/// Why a result could not be written at all.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// The completer's tasks are gone (the processor is stopping).
    #[error("the completer has stopped")]
    Stopped,
    /// The batch could not be written (the database, after retries).
    #[error("{0}")]
    Database(String),
}

type Reply = oneshot::Sender<Result<Written, WriteError>>;

/// Handle to the completer task.
#[derive(Clone, Debug)]
pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<(Ack, Reply)>,
}

impl Completer {
    /// Starts the completer's workers and its counter in `tasks`; they
    /// stop with the group, once the results queued by then are written.
    pub(crate) fn start(
        tasks: &Tasks,
        store: Store,
        expiry: Duration,
        batch_size: usize,
    ) -> Completer {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        let completed = Arc::new(Tally::default());
        let writers = writers(batch_size, store.driver().concurrent_writes());
        let turns = Arc::new(Semaphore::new(writers));
        for _ in 0..=writers {
            let worker = run(
                store.clone(),
                expiry,
                Queue {
                    rx: rx.clone(),
                    turns: turns.clone(),
                },
                completed.clone(),
                tasks.token(),
            );
            tasks.spawn("completer", worker);
        }
        tasks.spawn("completion count", count(store, completed, tasks.token()));
        Completer { tx }
    }

    /// Writes one result (batched with others).
    pub(crate) async fn write(&self, ack: Ack) -> Result<Written, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((ack, reply))
            .map_err(|_| WriteError::Stopped)?;
        rx.await.map_err(|_| WriteError::Stopped)?
    }
}

/// What the workers share: the results to write, and the turns to write them.
struct Queue {
    rx: Arc<Mutex<mpsc::UnboundedReceiver<(Ack, Reply)>>>,
    turns: Arc<Semaphore>,
}

async fn run(
    store: Store,
    expiry: Duration,
    queue: Queue,
    completed: Arc<Tally>,
    stop: CancellationToken,
) {
    loop {
        let mut rx = queue.rx.lock().await;
        let (batch, _turn) = {
            // Queued results first: a stop ends the worker only once the
            // queue is empty.
            let first = tokio::select! {
                biased;
                first = rx.recv() => first,
                _ = stop.cancelled() => rx.try_recv().ok(),
            };
            let Some(first) = first else { return };
            // The batch forms while the writers are busy: it takes its
            // turn, then everything queued by then.
            let turn = tokio::time::timeout(SLOW_WRITE, queue.turns.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok);
            let size = |(a, _): &(Ack, Reply)| a.write.data.as_ref().map_or(0, |d| d.len());
            let mut bytes = size(&first);
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
                match rx.try_recv() {
                    Ok(next) => {
                        bytes += size(&next);
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            // A batch of large data is written alone: the other workers
            // wait for the queue until it is in the database.
            if bytes < MAX_BATCH_BYTES {
                drop(rx);
            }
            (batch, turn)
        };
        let (acks, replies): (Vec<Ack>, Vec<Reply>) = batch.into_iter().unzip();
        match store.write_results(&acks, expiry).await {
            Ok(written) => {
                let ok = acks
                    .iter()
                    .zip(&written)
                    .filter(|(_, w)| **w == Written::Yes);
                for (a, _) in ok {
                    completed.add(&a.write);
                }
                for (reply, w) in replies.into_iter().zip(written) {
                    let _ = reply.send(Ok(w));
                }
            }
            Err(e) => {
                let e = WriteError::Database(e.to_string());
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Results written since the last tick: items completed, attempts failed
/// to be retried, items failed for good.
#[derive(Debug, Default)]
struct Tally([AtomicU64; 3]);

impl Tally {
    /// Counts one written result.
    fn add(&self, w: &ItemWrite) {
        let slot = match w.status {
            Status::Complete => 0,
            Status::Available if !w.new_step => 1,
            Status::Failed => 2,
            _ => return,
        };
        self.0[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the counts, leaving zeros.
    fn take(&self) -> [u64; 3] {
        self.0.each_ref().map(|c| c.swap(0, Ordering::Relaxed))
    }

    /// Puts counts back (their write failed).
    fn put(&self, n: [u64; 3]) {
        for (c, n) in self.0.iter().zip(n) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Adds the results written since the last tick to the minute's counts
/// (`feed_completions`), once every [`COUNT_EVERY`], until `stop` (one
/// last time then). Only the overview and the throughput figures read
/// them: a failed write is tried again at the next tick, and a processor
/// that dies loses at most its last second of them, never a result.
async fn count(store: Store, completed: Arc<Tally>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(COUNT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.cancelled() => true,
        };
        let n = completed.take();
        if n != [0; 3]
            && let Err(e) = store.add_completions(n).await
        {
            tracing::warn!(error = %e, results = ?n, "counting results for the overview failed; trying again in a second");
            completed.put(n);
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_on_a_server_database_get_more_writers() {
        use crate::store::Driver;
        let of = |d: Driver| d.concurrent_writes();
        assert_eq!(writers(100, of(Driver::Postgres)), BATCH_WRITERS);
        assert_eq!(writers(100, of(Driver::MySql)), BATCH_WRITERS);
        assert_eq!(writers(100, of(Driver::Sqlite)), WRITERS);
        assert_eq!(writers(1, of(Driver::Postgres)), WRITERS);
    }
}
