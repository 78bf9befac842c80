//! Batches result writes, as River's completer does: deliveries hand their
//! results here, and whatever has queued up while the previous batch was
//! being written goes to the database as one batch. Under load that is
//! one commit per batch instead of one per item; when idle a result is
//! written at once, with no added latency.

use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};

use crate::store::{Ack, ItemStatus, Store, Written};

/// Most results written in one batch.
const MAX_BATCH: usize = 256;

/// Batches written concurrently: while one is in the database the next
/// one forms, so a slow commit does not stall every delivery.
const WORKERS: usize = 2;

/// Why a result could not be written at all.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WriteError {
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
pub struct Completer {
    tx: mpsc::UnboundedSender<(Ack, Reply)>,
}

impl Completer {
    /// Starts the completer task; it ends when every handle is dropped.
    pub fn start(store: Store, expiry: Duration) -> Completer {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..WORKERS {
            tokio::spawn(run(store.clone(), expiry, rx.clone()));
        }
        Completer { tx }
    }

    /// Writes one result (batched with others).
    pub async fn write(&self, ack: Ack) -> Result<Written, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((ack, reply))
            .map_err(|_| WriteError::Stopped)?;
        rx.await.map_err(|_| WriteError::Stopped)?
    }
}

async fn run(
    store: Store,
    expiry: Duration,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<(Ack, Reply)>>>,
) {
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else { return };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
        };
        let (acks, replies): (Vec<Ack>, Vec<Reply>) = batch.into_iter().unzip();
        match store.write_results(&acks, expiry).await {
            Ok(written) => {
                let completed = acks
                    .iter()
                    .zip(&written)
                    .filter(|(a, w)| a.write.status == ItemStatus::Complete && **w == Written::Yes)
                    .count();
                // Only the overview's chart reads this count: a failure
                // costs a point on it, never a result.
                if completed > 0
                    && let Err(e) = store.add_completions(completed as u64).await
                {
                    tracing::warn!(error = %e, items = completed, "counting completed items for the overview failed");
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
