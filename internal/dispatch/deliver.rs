//! One delivery: a handler call for one item or a batch of items, then
//! each item's fenced result through the completer. The loop is told as
//! soon as the handler has answered, so the call's slot is free while the
//! results are being written (the items stay in flight until then).

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::verdict::{Verdict, breaker};
use crate::completer::WriteError;
use crate::context::Delivering;
use crate::handler::{Job, Outcome};
use crate::ids::{ItemKey, SessionId};
use crate::limits::Permit;
use crate::metrics::TenantLabel;
use crate::policy::Label;
use crate::status::Status;
use crate::store::{Ack, Fence, ItemWrite, ReadyItem, Written};

/// How one item's delivery ended, reported back to the loop.
#[derive(Debug)]
pub(super) enum Delivery {
    /// A result was written that took the item out of its partition's
    /// ready items (done, failed, or on to a later gate).
    Finished,
    /// The item may be ready again at its gate, after the wait given: a
    /// result that keeps it available (a retry, another step at the same
    /// gate) was written, or none was (the session lost). Its partition's
    /// next refill reads from its first ready item.
    Again(Duration),
    /// The handler could not be reached (why); nothing was written.
    Unreachable(String),
    /// The handler still looks away (the breaker is open) but this
    /// probe's failure was counted as an attempt (the item was probed
    /// before in this outage): the outage goes on, and the item may be
    /// ready again after the wait (None: it failed for good).
    Away(Option<Duration>, String),
    /// The result could not be stored at all (the database is unreachable,
    /// refused even the failed attempt, or rejected it as stale): the item
    /// cools down here for a backoff before it may be fetched again.
    Unwritten(Duration),
    /// The handler answered 404 or 405 with no answer before it: perhaps
    /// a wrong URL, so nothing was written (no attempt counted) and the
    /// item waits here for a backoff before it is tried again.
    Spared(Duration),
}

/// Where a delivery task reports (with its task id) that its handler call is over.
pub(super) type Answered = mpsc::UnboundedSender<tokio::task::Id>;

/// One handler call: its items (a batch, or one), each item's tenant
/// label, the flow-control permit it holds, and whether its failures count
/// attempts while the breaker is open (a probe of an item already probed
/// in this outage).
pub(super) struct Call {
    pub items: Vec<ReadyItem>,
    pub tenants: Vec<TenantLabel>,
    pub permit: Option<Permit>,
    pub counted: bool,
}

/// Calls the handler for `items` (one request; a batch when `--batch-size`
/// is above 1), reports the answer on `answered`, then writes each item's
/// fenced result. `counted`: its failures count attempts even while the
/// circuit breaker is open (a probe of an item already probed in this
/// outage). Runs as its own task.
pub(super) async fn deliver(
    ctx: &Delivering<'_>,
    me: &SessionId,
    call: Call,
    answered: &Answered,
) -> Vec<(ItemKey, Delivery)> {
    let Call {
        items,
        tenants,
        permit,
        counted,
    } = call;
    let span = match items.as_slice() {
        [one] => item_span(&one.fence),
        many => tracing::debug_span!("batch", items = many.len()),
    };
    let single = items.len() == 1;
    let trace = crate::otel::process(&items);
    let traced = trace.clone();
    async move {
        let (fences, jobs): (Vec<Fence>, Vec<Job>) = items
            .into_iter()
            .map(|ReadyItem { fence, data, .. }| {
                let job = Job {
                    item_id: fence.id.clone(),
                    partition_id: fence.partition_id.clone(),
                    gate: fence.gate,
                    attempt: attempt(&fence),
                    idempotency_key: fence.idempotency_key(),
                    processor_id: me.clone(),
                    data: data.into(),
                    inputs: ctx
                        .inputs
                        .and_then(|i| i.url(&fence.partition_id, fence.gate)),
                };
                (fence, job)
            })
            .unzip();
        let started = std::time::Instant::now();
        let mut outcomes = if ctx.batch_size == 1 {
            vec![ctx.handler.handle(&jobs[0]).await]
        } else {
            ctx.handler.handle_batch(&jobs).await
        };
        drop(jobs);
        throttle(ctx, &outcomes);
        let took = started.elapsed().as_secs_f64();
        ctx.metrics.handler_seconds.observe(took);
        let mut seen: Vec<&TenantLabel> = Vec::with_capacity(1);
        for t in &tenants {
            if !seen.contains(&t) {
                seen.push(t);
                ctx.metrics.tenant_handler_seconds.get_or_create(t).observe(took);
            }
        }
        if outcomes.len() != fences.len() {
            let message = format!(
                "the handler returned {} outcomes for a batch of {}",
                outcomes.len(),
                fences.len()
            );
            tracing::error!(%message, "a failed attempt for every item of the batch");
            let failed = Outcome::retry(message);
            outcomes = vec![failed; fences.len()];
        }
        // The call failed when all of its items did (for a batch).
        let failed = outcomes.iter().all(|o| o.error_type().is_some());
        if let Some(e) = outcomes.first().and_then(Outcome::error_type)
            && failed
        {
            crate::otel::failed(&traced, e);
        }
        ctx.metrics.recent.call(started.elapsed(), failed);
        let first = fences.first().map_or("", |f| f.id.as_str());
        let (outcomes, verdict) = breaker(ctx, outcomes, started, first, counted);
        // The slot is freed once the breaker has the answer: every call
        // started is in the breaker's window or holds a slot, so at most
        // `--concurrency` calls start before dispatch sees it open.
        drop(permit);
        let _ = answered.send(tokio::task::id());
        let away = verdict == Verdict::Away;
        let policy = ctx.retries;
        let each = fences.into_iter().zip(outcomes).zip(&tenants);
        let mut each = each.map(|((fence, outcome), tenant)| {
            let span = (!single).then(|| item_span(&fence));
            let id = fence.key();
            let done = async move {
                let why = match outcome {
                    Outcome::Unreachable { message } => {
                        ctx.metrics.handler_unreachable.inc();
                        tracing::debug!(error = %message, "handler unreachable");
                        return Delivery::Unreachable(message);
                    }
                    Outcome::Failed { ref message, .. } if away => message.clone(),
                    Outcome::Failed { ref message, .. } if verdict == Verdict::Spared => {
                        tracing::debug!(error = %message, "not counted: the handler URL may be wrong");
                        return Delivery::Spared(policy.delay(attempt(&fence)));
                    }
                    _ => String::new(),
                };
                let delivery = match policy.decide(&fence, outcome) {
                    Some((write, label)) => record(ctx, me, fence, write, (label, tenant)).await,
                    None => Delivery::Unreachable("handler unreachable".into()),
                };
                match delivery {
                    Delivery::Again(wait) if away => Delivery::Away(Some(wait), why),
                    Delivery::Finished if away => Delivery::Away(None, why),
                    other => other,
                }
            };
            async move {
                (
                    id,
                    done.instrument(span.unwrap_or_else(tracing::Span::current))
                        .await,
                )
            }
        });
        // One item (the usual case) is awaited as it is: join_all would
        // move its future into a vector of its own.
        match (single, each.next()) {
            (true, Some(one)) => vec![one.await],
            (_, first) => join_all(first.into_iter().chain(each)).await,
        }
    }
    .instrument(span)
    .instrument(trace)
    .await
}

/// Feeds the call's answer to the adaptive rate: throttled when any item
/// was answered "too many" (429, or 503 with `Retry-After`).
fn throttle(ctx: &Delivering<'_>, outcomes: &[Outcome]) {
    let throttled = outcomes.iter().any(Outcome::is_throttled);
    if throttled {
        ctx.metrics.throttled.inc();
    }
    let rate = ctx.limits.answered(outcomes.len(), throttled);
    ctx.metrics
        .adaptive_rate
        .set(rate.map_or(0, |r| r.round() as i64));
}

/// The 1-based attempt a delivery of this item is.
fn attempt(fence: &Fence) -> u32 {
    u32::try_from(fence.attempts).unwrap_or(0) + 1
}

/// The span of one item's delivery, for debugging: a span at the default
/// level would cost every item its fields formatted, so the events that
/// report on an item (below) carry its fields themselves.
fn item_span(f: &Fence) -> tracing::Span {
    tracing::debug_span!("delivery", partition = %f.partition_id, item = %f.id, gate = f.gate, attempt = attempt(f))
}

/// Writes one result through the completer. A row the database refuses is
/// recorded instead as a failed attempt that says why (with a backoff), so
/// that nothing is fetched again without an attempt counted.
pub(super) async fn record(
    ctx: &Delivering<'_>,
    me: &SessionId,
    fence: Fence,
    write: ItemWrite,
    (label, tenant): (Label, &TenantLabel),
) -> Delivery {
    let policy = ctx.retries;
    let cool = policy.delay(attempt(&fence));
    let (mut write, mut label, mut fallback) = (write, label, false);
    let mut waiting: Option<Waiting> = None;
    let mut retry =
        crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let (partition, item, gate, attempt) =
            (&fence.partition_id, &fence.id, fence.gate, attempt(&fence));
        if ctx.session.id() != *me || !ctx.session.live(ctx.session_expiry) {
            // Every answer in flight when a session ends comes here: one
            // line at a bounded rate, with a count.
            static DEAD: crate::ratelog::Every = crate::ratelog::Every::new();
            if let Some(n) = DEAD.due() {
                tracing::warn!(%partition, %item, gate, attempt, results = n, "result not written: this processor's session is no longer live");
            }
            ctx.metrics.outcome(Label::Rejected.as_str(), tenant);
            return Delivery::Again(Duration::ZERO);
        }
        let ack = Ack {
            fence: fence.clone(),
            session: me.clone(),
            write: write.clone(),
        };
        match ctx.completer.write(ack).await {
            Ok(Written::Yes) => {
                ctx.metrics.outcome(label.as_str(), tenant);
                let error = write.last_error.as_deref().unwrap_or("");
                match label {
                    Label::Failed => {
                        tracing::warn!(%partition, %item, gate, attempts = write.attempts, error, "item failed")
                    }
                    Label::Retried => {
                        tracing::info!(%partition, %item, gate, attempt, error, "attempt failed; will retry")
                    }
                    _ => tracing::debug!(
                        next_gate = write.gate,
                        outcome = label.as_str(),
                        "result written"
                    ),
                }
                return if write.status == Status::Available {
                    Delivery::Again(write.delay.unwrap_or_default())
                } else {
                    Delivery::Finished
                };
            }
            Ok(Written::Stale) => {
                ctx.metrics.outcome(Label::Rejected.as_str(), tenant);
                // A lease lost (a session that ended) rejects every answer
                // in flight for its partitions: one line at a bounded rate.
                static STALE: crate::ratelog::Every = crate::ratelog::Every::new();
                if let Some(n) = STALE.due() {
                    tracing::warn!(
                        %partition, %item, gate, attempt, results = n,
                        "stale result rejected: the item changed or its partition is no longer held by this session"
                    );
                }
                // Not at once: while the database takes this session for
                // dead but its row still names it the owner, every answer
                // would be rejected and the item sent again in a hot loop.
                // A backoff later the keeper knows which it is.
                return Delivery::Unwritten(cool);
            }
            Ok(Written::Refused(why)) if !fallback => {
                tracing::error!(%partition, %item, gate, attempt, error = %why, "the database refused the result; recording a failed attempt instead");
                let outcome =
                    Outcome::retry(format!("the database refused the handler's result: {why}"));
                let Some((w, l)) = policy.decide(&fence, outcome) else {
                    return Delivery::Unwritten(cool);
                };
                (write, label, fallback) = (w, l, true);
            }
            Ok(Written::Refused(why)) => {
                tracing::error!(%partition, %item, gate, attempt, error = %why, retry_in = ?cool, "the database refused even the failed attempt; the item waits here before it runs again");
                return Delivery::Unwritten(cool);
            }
            Err(WriteError::Database(e)) => {
                // The database's fault, never the handler's: the answer is
                // kept and its fenced write tried again on a fresh
                // connection until it is stored, or refused as stale
                // (the lease ended meanwhile).
                let since = waiting
                    .get_or_insert_with(|| Waiting::new(ctx.health, &e))
                    .since;
                if let Some(n) = ctx.health.unwritten.due() {
                    let held = Duration::from_secs(since.elapsed().as_secs());
                    tracing::error!(
                        error = %e,
                        results_waiting = ctx.health.writes_waiting.load(Ordering::Relaxed),
                        failed_writes = n,
                        for_ = %humantime::format_duration(held),
                        "the database does not take results: the handler's answers are kept and written again on fresh connections; dispatch holds off meanwhile"
                    );
                }
                retry.wait().await;
            }
            Err(e @ WriteError::Stopped) => {
                tracing::warn!(%partition, %item, gate, attempt, error = %e, "result not written: the processor is stopping; the item runs again");
                return Delivery::Unwritten(cool);
            }
        }
    }
}

/// A result whose write the database failed and that is being written
/// again: while any is, dispatch starts no call (answers it could not
/// store), and `status` says why.
struct Waiting<'a> {
    health: &'a crate::server::Health,
    since: std::time::Instant,
}

impl<'a> Waiting<'a> {
    fn new(health: &'a crate::server::Health, error: &str) -> Self {
        let since = std::time::Instant::now();
        if health.writes_waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            *health.db_hold.lock().expect("hold lock") = Some(crate::server::Hold {
                reason: format!("the database does not take results: {error}"),
                since,
            });
        }
        Self { health, since }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.health.writes_waiting.fetch_sub(1, Ordering::Relaxed) == 1 {
            *self.health.db_hold.lock().expect("hold lock") = None;
            if self.health.unwritten.over() {
                tracing::info!("the database takes results again: dispatch resumes");
            }
        }
    }
}
