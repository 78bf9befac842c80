//! The handler side: the [`Handler`] trait that turns an item (or a batch
//! of items) into an [`Outcome`], [`HttpHandler`], which POSTs them to the
//! user's HTTP handler, and the parser of its answers (the book: Writing a
//! handler).

use std::time::Duration;

use async_trait::async_trait;

pub use crate::status::PartitionEnd;

mod answer;
mod http;
mod keys;
mod sign;

pub(crate) use answer::parse_retry_after;
pub use http::HttpHandler;
pub use keys::{batch_webhook_id, events_secret, webhook_id};
pub use sign::{EVENT_SIGNED_HEADERS, SIGNED_HEADERS, event_signature_v2, signature, signature_v2};
pub(crate) use sign::{Kind, Signer};

/// One delivery of an item to a handler. Fields may be added: read them,
/// do not build one.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Job {
    /// Item id (`Feed-Item-Id`).
    pub item_id: crate::ids::ItemId,
    /// Partition id (`Feed-Partition-Id`).
    pub partition_id: crate::ids::PartitionId,
    /// The item's gate, which is its partition's gate (`Feed-Gate`).
    pub gate: i64,
    /// 1-based attempt of the current step (`Feed-Attempt`).
    pub attempt: u32,
    /// Stable across redeliveries of the same step (`Idempotency-Key`).
    pub idempotency_key: String,
    /// The session that dispatched it (`Feed-Processor-Id`).
    pub processor_id: crate::ids::SessionId,
    /// The item's data, forwarded unchanged (shared, so the request body
    /// is not a copy of it).
    pub data: bytes::Bytes,
    /// At a gate above 0, while the processor has a listener: the URL of
    /// the partition's items at the gates below (`Feed-Inputs`; a fan-in's
    /// inputs, as JSON lines).
    pub inputs: Option<String>,
}

/// What a handler made of one delivery. Variants and their fields may be
/// added: build one with the constructors ([`Outcome::step`],
/// [`Outcome::done`], [`Outcome::retry`], [`Outcome::fail`]) and match
/// with `..`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// A valid answer: the next gate (None = unchanged), whether the item
    /// is done, and its new data (None = unchanged).
    #[non_exhaustive]
    Step {
        /// Next gate.
        gate: Option<i64>,
        /// Terminal state reached.
        done: bool,
        /// Replacement data (a slice of the handler's answer, which it
        /// keeps until written).
        data: Option<bytes::Bytes>,
        /// The answer ends the item's partition now (`"partition"`).
        ending: Option<Ending>,
        /// Items the answer adds to the item's partition (`"items"`),
        /// written with its result.
        children: Vec<Child>,
    },
    /// A failed attempt.
    #[non_exhaustive]
    Failed {
        /// What went wrong, stored in `last_error`.
        message: String,
        /// False = fail the item now, whatever attempts are left.
        retry: bool,
        /// The handler's `Retry-After`, if any.
        retry_after: Option<Duration>,
        /// The handler's service itself looks down (a 5xx, a timeout, a
        /// broken connection) rather than refusing this item: the circuit
        /// breaker counts it.
        outage: bool,
        /// The handler said "too many" (a 429, or a 503 with
        /// `Retry-After`): the adaptive rate drops.
        throttled: bool,
        /// The status when it was 404 or 405: the handler's URL may be
        /// wrong rather than the item (the circuit breaker decides).
        missing: Option<u16>,
    },
    /// The handler could not be reached at all: no attempt is counted and
    /// dispatch holds off until it is back.
    #[non_exhaustive]
    Unreachable {
        /// Why (connection refused, DNS…).
        message: String,
    },
}

/// An item an answer spawns into its own partition (`"items"`). Build
/// one with [`Child::new`]; fields may be added.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Child {
    /// Its id; None = derived from the answering step: `<Idempotency-Key>/<n>`
    /// (`n` its place in the answer, from 0), so a step answered again
    /// names the same children.
    pub id: Option<String>,
    /// Its gate; None = the answering item's gate (it runs now).
    pub gate: Option<i64>,
    /// Its data, forwarded to the handler unchanged.
    pub data: bytes::Bytes,
}

impl Child {
    /// A child of `data` at the answering item's gate, its id derived.
    pub fn new(data: impl Into<bytes::Bytes>) -> Child {
        Child {
            id: None,
            gate: None,
            data: data.into(),
        }
    }

    /// This child with its own id.
    pub fn id(mut self, id: impl Into<String>) -> Child {
        self.id = Some(id.into());
        self
    }

    /// This child at `gate` (at or above the answering item's).
    pub fn gate(mut self, gate: i64) -> Child {
        self.gate = Some(gate);
        self
    }
}

/// An answer's end of its partition, with the handler's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// How the partition ends.
    pub end: PartitionEnd,
    /// Why, as the handler said (`"reason"`).
    pub reason: Option<String>,
}

impl Outcome {
    /// A valid answer: the next gate (None = unchanged), whether the item
    /// is done, and its new data (None = unchanged).
    pub fn step(gate: Option<i64>, done: bool, data: Option<bytes::Bytes>) -> Outcome {
        Outcome::Step {
            gate,
            done,
            data,
            ending: None,
            children: Vec::new(),
        }
    }

    /// This answer adds `items` to the item's partition, in the same
    /// transaction as its result; other outcomes are returned unchanged.
    pub fn spawning(mut self, items: Vec<Child>) -> Outcome {
        if let Outcome::Step { children, .. } = &mut self {
            *children = items;
        }
        self
    }

    /// This answer ends the item's partition (`end`, with `reason` kept
    /// as the item's `last_error`); other outcomes are returned unchanged.
    pub fn ending(mut self, end: PartitionEnd, reason: Option<String>) -> Outcome {
        if let Outcome::Step { ending, .. } = &mut self {
            *ending = Some(Ending { end, reason });
        }
        self
    }

    /// Done, data unchanged: the answer `null`, `{}` or an empty body.
    pub fn done() -> Outcome {
        Outcome::step(None, true, None)
    }

    /// A failed attempt, retried after the backoff while attempts are left.
    pub fn retry(message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            message: message.into(),
            retry: true,
            retry_after: None,
            outage: false,
            throttled: false,
            missing: None,
        }
    }

    /// A failed attempt that fails the item now, whatever attempts are left.
    pub fn fail(message: impl Into<String>) -> Outcome {
        Outcome::Failed {
            message: message.into(),
            retry: false,
            retry_after: None,
            outage: false,
            throttled: false,
            missing: None,
        }
    }

    /// This failed attempt's retry waits at least `delay` (a `Retry-After`);
    /// other outcomes are returned unchanged.
    pub fn after(mut self, delay: Duration) -> Outcome {
        if let Outcome::Failed { retry_after, .. } = &mut self {
            *retry_after = Some(delay);
        }
        self
    }

    /// This failed attempt is a sign that the handler's service is down
    /// (a 5xx, a timeout, a broken connection), for the circuit breaker;
    /// other outcomes are returned unchanged.
    pub fn outage(mut self) -> Outcome {
        if let Outcome::Failed { outage, .. } = &mut self {
            *outage = true;
        }
        self
    }

    /// Whether the handler said "too many" (429, or 503 with `Retry-After`).
    pub fn is_throttled(&self) -> bool {
        matches!(
            self,
            Outcome::Failed {
                throttled: true,
                ..
            }
        )
    }

    /// Whether this is a failed attempt marked by [`Outcome::outage`].
    pub fn is_outage(&self) -> bool {
        matches!(self, Outcome::Failed { outage: true, .. })
    }

    /// The status of a 404 or 405 answer (the URL may be wrong).
    pub fn missing(&self) -> Option<u16> {
        match self {
            Outcome::Failed { missing, .. } => *missing,
            _ => None,
        }
    }

    /// What went wrong, in a word for traces (`error.type`); None for a
    /// valid answer.
    pub fn error_type(&self) -> Option<&'static str> {
        match self {
            Outcome::Step { .. } => None,
            Outcome::Unreachable { .. } => Some("unreachable"),
            Outcome::Failed {
                throttled: true, ..
            } => Some("throttled"),
            Outcome::Failed { outage: true, .. } => Some("unavailable"),
            Outcome::Failed { retry: false, .. } => Some("rejected"),
            Outcome::Failed { .. } => Some("error"),
        }
    }

    /// The handler could not be reached at all (no attempt is counted).
    pub fn unreachable(message: impl Into<String>) -> Outcome {
        Outcome::Unreachable {
            message: message.into(),
        }
    }
}

/// The user's handler: turns one delivery into an outcome. [`HttpHandler`]
/// calls an HTTP service; implement it to run a processor with an
/// in-process handler instead.
///
/// ```
/// use feed::{Handler, Job, Outcome};
///
/// struct Upper;
///
/// #[async_trait::async_trait]
/// impl Handler for Upper {
///     async fn handle(&self, job: &Job) -> Outcome {
///         let text = String::from_utf8_lossy(&job.data).to_uppercase();
///         Outcome::step(None, true, Some(text.into_bytes().into()))
///     }
/// }
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery.
    async fn handle(&self, job: &Job) -> Outcome;

    /// Handles a batch (with `--batch-size` above 1): one outcome per job,
    /// in order. The default calls [`Handler::handle`] per job, one after
    /// the other; override it when the work itself batches (one query,
    /// one request for many items).
    async fn handle_batch(&self, jobs: &[Job]) -> Vec<Outcome> {
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            out.push(self.handle(job).await);
        }
        out
    }
}
