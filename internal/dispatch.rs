//! The dispatch loop: poll, deliver, write fenced results, check gates, balance.
//!
//! One query per poll fetches ready items across every held partition,
//! bounded by free concurrency slots. Items in flight are tracked so none is
//! delivered twice by this processor. No connection is held across a
//! handler call: each delivery is a task that calls the handler, then writes
//! its result in one fenced statement.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::handler::{Job, Outcome};
use crate::leases::{self, Held};
use crate::run::Shared;
use crate::store::{Ack, ItemWrite, ReadyItem};
use crate::{backoff, gates};

/// How one delivery ended, reported back to the loop.
#[derive(Debug)]
enum Delivery {
    /// A result was written (or rejected as stale, or failed to write).
    Finished,
    /// The handler could not be reached; nothing was written.
    Unreachable,
}

/// The loop's state: what is held, what is in flight, whether the handler is paused.
struct Dispatcher {
    shared: Arc<Shared>,
    /// Session id the held set belongs to; a new id means every lease was lost.
    me: String,
    held: Held,
    /// Item id → partition id, for items being delivered.
    in_flight: HashMap<String, String>,
    /// Fetched, not yet started: a prefetch buffer so that the next
    /// completions start work without a query each.
    buffer: VecDeque<ReadyItem>,
    /// The last fetch filled its limit: more work is probably ready.
    more: bool,
    tasks: JoinSet<(String, String, Delivery)>,
    /// While the handler is unreachable: no dispatch before this instant, then one probe.
    paused_until: Option<Instant>,
    pause: Duration,
}

/// Runs until `cancel`, then drains in-flight deliveries up to the drain timeout.
pub async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut d = Dispatcher {
        me: shared.session.id(),
        shared: shared.clone(),
        held: Held::default(),
        in_flight: HashMap::new(),
        buffer: VecDeque::new(),
        more: false,
        tasks: JoinSet::new(),
        paused_until: None,
        pause: Duration::from_millis(250),
    };
    let cfg = shared.config.clone();
    let mut acquire = tokio::time::interval(cfg.acquire_interval);
    acquire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_poll = Instant::now();
    // While every slot is busy and more work is ready, partitions are not
    // running dry: check gates at most once per poll interval then.
    let mut full = false;
    let mut next_check = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            Some(joined) = d.tasks.join_next(), if !d.tasks.is_empty() => {
                d.finished(joined);
                while let Some(more) = d.tasks.try_join_next() {
                    d.finished(more);
                }
                next_poll = next_poll.min(Instant::now());
            }
            _ = acquire.tick() => {
                d.sync_session();
                let before = d.held.versions.len();
                if let Err(e) = leases::balance(&shared, &d.me, &mut d.held).await {
                    tracing::warn!(error = %e, "balancing leases failed; will retry");
                }
                // Buffered items of partitions lost meanwhile are not delivered.
                let held = &d.held.versions;
                d.buffer.retain(|i| held.contains_key(&i.partition_id));
                if d.held.versions.len() != before {
                    next_poll = Instant::now();
                }
            }
            _ = shared.wake.notified() => next_poll = Instant::now(),
            _ = tokio::time::sleep_until(next_poll) => {}
        }
        d.sync_session();
        if !full || Instant::now() >= next_check {
            next_check = Instant::now() + cfg.poll_interval;
            let busy = d.busy_partitions();
            match gates::check(&shared, &d.me, &mut d.held, &busy).await {
                Ok(c) if c.advanced => next_poll = Instant::now(),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "gate check failed; will retry"),
            }
        }
        if Instant::now() >= next_poll {
            (next_poll, full) = d.poll().await;
        }
    }
    d.drain(cfg.drain_timeout).await;
}

impl Dispatcher {
    /// Adopts a new session id: every lease of the old one is gone.
    fn sync_session(&mut self) {
        let id = self.shared.session.id();
        if id != self.me {
            let lost = self.held.versions.len();
            tracing::warn!(old = %self.me, new = %id, partitions = lost, "session replaced; dropping every partition");
            self.shared.metrics.leases_lost.inc_by(lost as u64);
            self.me = id;
            self.held = Held::default();
            self.buffer.clear();
            self.shared.metrics.partitions_held.set(0);
        }
    }

    fn busy_partitions(&self) -> HashSet<String> {
        self.in_flight
            .values()
            .cloned()
            .chain(self.buffer.iter().map(|i| i.partition_id.clone()))
            .collect()
    }

    /// Fetches and starts ready items; returns when to poll next and
    /// whether more work was ready than slots.
    async fn poll(&mut self) -> (Instant, bool) {
        let shared = self.shared.clone();
        let cfg = &shared.config;
        let now = Instant::now();
        if let Some(until) = self.paused_until {
            if now < until {
                return (until, false);
            }
            if !self.in_flight.is_empty() {
                return (now + cfg.poll_interval, false);
            }
        }
        if !self.shared.session.live(cfg.session_expiry) {
            return (now + cfg.poll_interval, false);
        }
        // One probe delivery while the handler is down.
        let slots = if self.paused_until.is_some() {
            1
        } else {
            cfg.concurrency - self.in_flight.len()
        };
        if slots == 0 {
            return (now + cfg.poll_interval, false);
        }
        // Refill the buffer when it could not cover the free slots and half
        // the concurrency again; then one query serves several completions.
        if self.buffer.len() < slots + cfg.concurrency / 2 {
            self.refill(cfg.concurrency * 2 - self.buffer.len().min(cfg.concurrency))
                .await;
        }
        for _ in 0..slots {
            let Some(item) = self.buffer.pop_front() else {
                break;
            };
            self.start(item);
        }
        // Either the slots are now full (the next completion polls again at
        // once) or nothing more is ready: wait for the poll interval.
        (now + cfg.poll_interval, self.more)
    }

    /// Fetches up to `want` ready items that are neither in flight nor
    /// buffered. Up to a thousand such ids are left out in SQL; beyond that
    /// (huge --concurrency) extra rows are fetched and skipped here.
    async fn refill(&mut self, want: usize) {
        let known: Vec<String> = self
            .in_flight
            .keys()
            .cloned()
            .chain(self.buffer.iter().map(|i| i.id.clone()))
            .collect();
        let skip: &[String] = if known.len() <= 1000 { &known } else { &[] };
        let limit = want + known.len() - skip.len();
        match self.shared.store.ready_items(&self.me, limit, skip).await {
            Ok(items) => {
                self.more = items.len() == limit;
                let buffered: HashSet<String> = self.buffer.iter().map(|i| i.id.clone()).collect();
                self.buffer.extend(
                    items.into_iter().filter(|i| {
                        !self.in_flight.contains_key(&i.id) && !buffered.contains(&i.id)
                    }),
                );
            }
            Err(e) => tracing::warn!(error = %e, "polling for items failed; will retry"),
        }
    }

    fn start(&mut self, item: ReadyItem) {
        self.in_flight
            .insert(item.id.clone(), item.partition_id.clone());
        self.shared
            .metrics
            .in_flight
            .set(self.in_flight.len() as i64);
        let shared = self.shared.clone();
        let me = self.me.clone();
        self.tasks.spawn(async move {
            let (id, partition) = (item.id.clone(), item.partition_id.clone());
            let d = deliver(&shared, &me, item).await;
            (id, partition, d)
        });
    }

    fn finished(&mut self, joined: Result<(String, String, Delivery), tokio::task::JoinError>) {
        let Ok((id, partition, delivery)) = joined else {
            tracing::error!("a delivery task panicked; its item stays available");
            return;
        };
        self.in_flight.remove(&id);
        self.shared
            .metrics
            .in_flight
            .set(self.in_flight.len() as i64);
        self.held.dirty.insert(partition);
        let health = &self.shared.health.handler;
        match delivery {
            Delivery::Unreachable => {
                health.store(false, Ordering::Relaxed);
                if self.paused_until.is_none() {
                    tracing::warn!(
                        "handler unreachable: pausing dispatch (no attempts are counted)"
                    );
                } else {
                    self.pause = (self.pause * 2).min(Duration::from_secs(10));
                }
                self.paused_until = Some(Instant::now() + self.pause);
            }
            Delivery::Finished => {
                health.store(true, Ordering::Relaxed);
                if self.paused_until.take().is_some() {
                    tracing::info!("handler reachable again: resuming dispatch");
                    self.pause = Duration::from_millis(250);
                }
            }
        }
    }

    /// Waits for in-flight deliveries (their results are written) up to `timeout`.
    async fn drain(&mut self, timeout: Duration) {
        if self.tasks.is_empty() {
            return;
        }
        tracing::info!(
            in_flight = self.tasks.len(),
            "draining in-flight deliveries"
        );
        let deadline = Instant::now() + timeout;
        while !self.tasks.is_empty() {
            tokio::select! {
                Some(j) = self.tasks.join_next() => self.finished(j),
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(abandoned = self.tasks.len(), "drain timeout: abandoning deliveries; their items stay available");
                    self.tasks.abort_all();
                    break;
                }
            }
        }
    }
}

/// Calls the handler for one item and writes the fenced result.
async fn deliver(shared: &Shared, me: &str, item: ReadyItem) -> Delivery {
    let attempt = u32::try_from(item.attempts).unwrap_or(0) + 1;
    let job = Job {
        item_id: item.id.clone(),
        partition_id: item.partition_id.clone(),
        gate: item.gate,
        attempt,
        idempotency_key: format!("{}:{}", item.id, item.version),
        processor_id: me.to_string(),
        data: item.data.clone(),
    };
    let started = std::time::Instant::now();
    let outcome = shared.processor.process(&job).await;
    shared
        .metrics
        .handler_seconds
        .observe(started.elapsed().as_secs_f64());
    let (write, label) = match decide(shared, &item, attempt, outcome) {
        Some(w) => w,
        None => {
            shared.metrics.handler_unreachable.inc();
            return Delivery::Unreachable;
        }
    };
    let cfg = &shared.config;
    let span = (item.partition_id.as_str(), item.id.as_str(), item.gate);
    if shared.session.id() != me || !shared.session.live(cfg.session_expiry) {
        tracing::warn!(
            partition = span.0,
            item = span.1,
            gate = span.2,
            "result not written: this processor's session is no longer live"
        );
        shared.metrics.outcome("rejected");
        return Delivery::Finished;
    }
    let (attempts, error, next_gate) = (write.attempts, write.last_error.clone(), write.gate);
    let (partition, id, gate) = (item.partition_id.clone(), item.id.clone(), item.gate);
    let span = (partition.as_str(), id.as_str(), gate);
    let error = error.as_deref().unwrap_or("");
    let ack = Ack {
        item,
        session: me.to_string(),
        write,
    };
    match shared.completer.write(ack).await {
        Ok(true) => {
            shared.metrics.outcome(label);
            match label {
                "failed" => tracing::warn!(
                    partition = span.0,
                    item = span.1,
                    gate = span.2,
                    attempts,
                    error,
                    "item failed"
                ),
                "retried" => tracing::info!(
                    partition = span.0,
                    item = span.1,
                    gate = span.2,
                    attempt,
                    error,
                    "attempt failed; will retry"
                ),
                _ => tracing::debug!(
                    partition = span.0,
                    item = span.1,
                    gate = span.2,
                    next_gate,
                    outcome = label,
                    "result written"
                ),
            }
        }
        Ok(false) => {
            shared.metrics.outcome("rejected");
            tracing::warn!(
                partition = span.0,
                item = span.1,
                gate = span.2,
                "stale result rejected: the item changed or its partition is no longer held by this session"
            );
        }
        Err(e) => {
            shared.metrics.outcome("rejected");
            tracing::error!(partition = span.0, item = span.1, gate = span.2, error = %e, "could not write the result; the item stays available and will be delivered again");
        }
    }
    Delivery::Finished
}

/// The item's next state for an outcome, and the metric label; None when
/// the handler was unreachable (nothing is written, no attempt is counted).
fn decide(
    shared: &Shared,
    item: &ReadyItem,
    attempt: u32,
    outcome: Outcome,
) -> Option<(ItemWrite, &'static str)> {
    let cfg = &shared.config;
    let attempts = i32::try_from(attempt).unwrap_or(i32::MAX);
    let w = match outcome {
        Outcome::Unreachable { message } => {
            tracing::debug!(partition = %item.partition_id, item = %item.id, gate = item.gate, error = %message, "handler unreachable");
            return None;
        }
        Outcome::Step { gate, done, data } => {
            let next = gate.unwrap_or(item.gate);
            if next < item.gate {
                let msg = format!(
                    "handler answered gate {next}, below the partition's gate {}: an item cannot go back to an earlier gate, so it could never run again",
                    item.gate
                );
                return Some((failed(item, attempts, msg), "failed"));
            }
            let w = ItemWrite {
                status: if done { "complete" } else { "available" },
                gate: next,
                data,
                attempts: if done { attempts } else { 0 },
                last_error: None,
                delay: None,
                new_step: true,
            };
            return Some((w, if done { "done" } else { "stepped" }));
        }
        Outcome::Failed {
            message,
            retry,
            retry_after,
        } => {
            let exhausted = cfg.max_attempts != 0 && attempt >= cfg.max_attempts;
            if !retry {
                return Some((
                    failed(item, attempts, format!("{message} (not retried)")),
                    "failed",
                ));
            }
            if exhausted {
                let msg = format!(
                    "{message} (attempt {attempt} of {}; no attempts left)",
                    cfg.max_attempts
                );
                return Some((failed(item, attempts, msg), "failed"));
            }
            let delay = retry_after
                .map(|d| d.min(Duration::from_secs(86_400)))
                .unwrap_or_else(|| backoff::delay(cfg.backoff_base, cfg.backoff_max, attempt));
            ItemWrite {
                status: "available",
                gate: item.gate,
                data: None,
                attempts,
                last_error: Some(message),
                delay: Some(delay),
                new_step: false,
            }
        }
    };
    Some((w, "retried"))
}

fn failed(item: &ReadyItem, attempts: i32, message: String) -> ItemWrite {
    ItemWrite {
        status: "failed",
        gate: item.gate,
        data: None,
        attempts,
        last_error: Some(message),
        delay: None,
        new_step: true,
    }
}
