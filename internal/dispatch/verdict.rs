//! What the circuit breaker makes of a handler call: each result is fed
//! to it, and while it is open the failures that say "the handler is not
//! there" (502-504, timeouts, resets; a 404 or 405 for every item) become
//! "unreachable", so that no attempt is counted.

use std::sync::atomic::Ordering;

use crate::breaker::{Call, Turn};
use crate::context::Delivering;
use crate::handler::Outcome;

/// What the circuit breaker made of a call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The outcomes stand as they are.
    Plain,
    /// The breaker is open and this probe's failure counted an attempt.
    Away,
    /// A 404 or 405 spared: nothing is written.
    Spared,
}

/// Feeds the result of the call made at `started` (for items `first`
/// on) to the circuit breaker: an outage failure when every item of the
/// call failed as one, a 404 or 405 (a wrong URL?) when each answered
/// it, nothing when the handler was not reached at all (the loop's
/// hold-off deals with that). While the breaker is open those failures
/// become "unreachable": no attempt is counted, and dispatch holds off and
/// probes; unless `counted` (the same item probed again), so that an item
/// that fails alone is not probed for ever: then they stay attempts
/// (retried, a 404 too) and the verdict is `Away`. A 404 the breaker
/// spares is `Spared`: nothing is written.
pub(super) fn breaker(
    ctx: &Delivering<'_>,
    outcomes: Vec<Outcome>,
    started: std::time::Instant,
    first: &str,
    counted: bool,
) -> (Vec<Outcome>, Verdict) {
    if outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Unreachable { .. }))
    {
        return (outcomes, Verdict::Plain);
    }
    let missing = outcomes
        .first()
        .and_then(Outcome::missing)
        .filter(|_| outcomes.iter().all(|o| o.missing().is_some()));
    let call = if outcomes.iter().all(Outcome::is_outage) {
        Call::Outage(first)
    } else if missing.is_some() {
        Call::Missing(first)
    } else {
        Call::Answer
    };
    let turn = ctx.breaker.record(call, started);
    match turn {
        Turn::Opened => {
            ctx.metrics.breaker_open.set(1);
            ctx.metrics.breaker_trips.inc();
            ctx.health.breaker_open.store(true, Ordering::Relaxed);
            match missing {
                Some(code) => tracing::warn!(
                    "circuit breaker open: {} Dispatch holds off and probes (no attempts are counted)",
                    wrong_url(code)
                ),
                None => tracing::warn!(
                    "circuit breaker open: most handler calls, for many items, fail with 502-504 or time out; dispatch holds off and probes (no attempts are counted)"
                ),
            }
        }
        Turn::Closed => {
            ctx.metrics.breaker_open.set(0);
            ctx.health.breaker_open.store(false, Ordering::Relaxed);
            tracing::info!("circuit breaker closed: the handler answers again");
        }
        Turn::Spared => return (outcomes, Verdict::Spared),
        Turn::Stays { .. } => {}
    }
    if !turn.open() {
        return (outcomes, Verdict::Plain);
    }
    let failed = !matches!(call, Call::Answer);
    let outcomes = outcomes.into_iter().map(|o| match (o, missing) {
        (Outcome::Failed { message, .. }, Some(code)) if counted => {
            Outcome::retry(format!("{}: {message}", wrong_url(code)))
        }
        (o, _) if counted => o,
        (Outcome::Failed { message, .. }, Some(code)) => {
            Outcome::unreachable(format!("{} ({message})", wrong_url(code)))
        }
        (
            Outcome::Failed {
                message,
                outage: true,
                ..
            },
            None,
        ) => Outcome::unreachable(format!("circuit breaker open: {message}")),
        (other, _) => other,
    });
    let outcomes = outcomes.collect();
    let verdict = if counted && failed {
        Verdict::Away
    } else {
        Verdict::Plain
    };
    (outcomes, verdict)
}

/// What a handler that answers `code` (404 or 405) to every item is told.
fn wrong_url(code: u16) -> String {
    format!("the handler URL answers {code} for every item: is the path right?")
}
