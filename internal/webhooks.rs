//! `run --events-url`: delivers completion events (rows of `feed_events`)
//! as signed webhooks (`webhook-id` is the event id; `Feed-Signature`
//! signs an event's string, never an item's: see `handler::sign`).
//!
//! One processor at a time sends: the processors race for the `events`
//! row of `feed_maintenance` (a lease on the database clock, renewed each
//! round), as they do for retention. The holder sends the pending events
//! oldest first, a partition's events one after another, and marks each
//! `delivered` once the receiver accepts it; a failed attempt is stored
//! with a backoff, and an event refused for good (or out of attempts) is
//! kept as `failed`. If the holder dies mid-send, the next holder sends the
//! event again with the same id: delivery is at least once, and the
//! `Idempotency-Key` lets the receiver drop the repeat.
//!
//! Nothing loops hot on a failing receiver: every retry of an event waits
//! at least `--backoff-base`, whatever `Retry-After` says (`0` included),
//! and a round that did not deliver every event it read is followed by a
//! pause of `--poll-interval` before the next.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::{client, endpoint, error_chain, fixed_headers, unix_now};
use crate::config::Policy;
use crate::context::Session;
use crate::handler::{Kind, Signer};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::store::events::{Counts, Event};
use crate::{Config, Result, backoff};

/// Events read per round.
const BATCH: usize = 64;
/// Requests in flight at once.
const PARALLEL: usize = 16;
/// How often the holder refreshes the backlog gauges.
const GAUGES_EVERY: Duration = Duration::from_secs(10);

/// Sends events to the receiver at `--events-url`.
pub(crate) struct Webhooks {
    store: Store,
    metrics: Arc<Metrics>,
    /// Its id holds the `events` lease.
    session: Arc<Session>,
    /// Attempts per event before it is kept as failed; 0 = unlimited.
    max_attempts: u32,
    /// Its backoff spaces an event's attempts (events count their own).
    retries: Policy,
    /// The pause after a round that did not deliver all it read.
    poll_interval: Duration,
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    /// Signs each event; None = unsigned.
    signer: Option<Signer>,
    /// Outlives a round: a round's requests end within the request
    /// timeout, and the holder renews at each round.
    lease: Duration,
}

/// The JSON body of an event request.
#[derive(Serialize)]
struct Body<'a> {
    id: i64,
    event: &'a str,
    partition_id: &'a str,
    gate: i64,
    counts: Counts,
    occurred_at: String,
}

/// What one request came to.
enum Sent {
    Delivered,
    /// Try again after the delay (None: the stored backoff).
    Retry(String, Option<Duration>),
    /// The receiver refused it for good.
    Refused(String),
}

impl Webhooks {
    /// The sender for `--events-url`; None when it is not set.
    pub(crate) fn new(
        config: &Config,
        store: Store,
        metrics: Arc<Metrics>,
        session: Arc<Session>,
    ) -> Result<Option<Webhooks>> {
        let Some(url) = &config.events.url else {
            return Ok(None);
        };
        let headers = config
            .events
            .headers
            .as_ref()
            .unwrap_or(&config.handler.headers);
        let (flag, secrets) = match config.events.signing_secrets.as_slice() {
            [] => (
                "--signing-secret",
                &config
                    .handler
                    .signing_secrets
                    .iter()
                    .map(|s| crate::handler::events_secret(s))
                    .collect::<Result<Vec<_>>>()?,
            ),
            _ => ("--events-signing-secret", &config.events.signing_secrets),
        };
        Ok(Some(Webhooks {
            store,
            metrics,
            session,
            max_attempts: config.events.max_attempts,
            retries: config.retries,
            poll_interval: config.dispatch.poll_interval,
            client: client(config.handler.request_timeout, PARALLEL)?,
            url: endpoint("--events-url", url)?,
            headers: fixed_headers("application/json", headers, "--events-header")?,
            signer: Signer::new(flag, secrets, config.handler.signature_scheme, false)?,
            lease: config.handler.request_timeout + config.leases.session_expiry * 2,
        }))
    }

    /// Sends events until `cancel`. A round cut short loses nothing: an
    /// event is marked only once its answer is in.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut gauges_at = tokio::time::Instant::now();
        loop {
            let round = tokio::select! {
                _ = cancel.cancelled() => break,
                r = self.round() => r,
            };
            let again = match round {
                Ok((held, more)) => {
                    if held && gauges_at.elapsed() >= GAUGES_EVERY {
                        self.gauges().await;
                        gauges_at = tokio::time::Instant::now();
                    }
                    more
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event delivery round failed; trying again later");
                    false
                }
            };
            if !again {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(self.poll_interval) => {}
                }
            }
        }
        let me = self.session.id();
        if let Err(e) = self.store.release_maintenance("events", &me).await {
            tracing::debug!(error = %e, "could not release the events lease; it expires");
        }
    }

    /// One round: (whether this processor holds the lease, whether the
    /// next round may start at once: it read a full batch and delivered
    /// all of it).
    async fn round(&self) -> Result<(bool, bool)> {
        let (store, metrics) = (&self.store, &self.metrics);
        let me = self.session.id();
        if !store.lease_maintenance("events", &me, self.lease).await? {
            return Ok((false, false));
        }
        let events = store.deliverable(BATCH).await?;
        let full = events.len() == BATCH;
        let sent: Vec<(Event, Sent)> = futures_util::stream::iter(events)
            .map(|e| async move {
                let sent = self.send(&e).await;
                (e, sent)
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        let delivered: Vec<i64> = sent
            .iter()
            .filter(|(_, s)| matches!(s, Sent::Delivered))
            .map(|(e, _)| e.id)
            .collect();
        store.events_delivered(&delivered).await?;
        metrics.events_delivered.inc_by(delivered.len() as u64);
        for (e, s) in &sent {
            self.failed(e, s).await?;
        }
        Ok((true, full && delivered.len() == sent.len()))
    }

    /// Stores a failed attempt: a retry after its backoff, or `failed`.
    async fn failed(&self, e: &Event, sent: &Sent) -> Result<()> {
        let attempt = e.attempts as u32 + 1;
        let max = self.max_attempts;
        let out_of_attempts = max != 0 && attempt >= max;
        let (why, retry_in) = match sent {
            Sent::Delivered => return Ok(()),
            Sent::Refused(why) => (why, None),
            Sent::Retry(why, _) if out_of_attempts => (why, None),
            Sent::Retry(why, after) => {
                let (base, cap) = (self.retries.backoff_base, self.retries.backoff_max);
                (why, Some(retry_delay(*after, base, cap, attempt)))
            }
        };
        match retry_in {
            Some(wait) => {
                self.metrics.events_retried.inc();
                tracing::warn!(event = e.id, partition = %e.partition_id, kind = %e.kind, attempt, retry_in = ?wait, error = %why, "event not delivered; trying again later");
            }
            None => {
                self.metrics.events_failed.inc();
                tracing::error!(event = e.id, partition = %e.partition_id, kind = %e.kind, attempt, error = %why, "event not delivered and kept as failed; `processor events retry` sends it again");
            }
        }
        self.store.event_attempt_failed(e.id, why, retry_in).await
    }

    /// POSTs one event.
    async fn send(&self, e: &Event) -> Sent {
        let body = Body {
            id: e.id,
            event: &e.kind,
            partition_id: &e.partition_id,
            gate: e.gate,
            counts: e.counts,
            occurred_at: occurred_at(e.created_at),
        };
        let body = serde_json::to_vec(&body).expect("an event serializes");
        let mut extra = HeaderMap::with_capacity(5);
        let Ok(partition) = HeaderValue::from_str(&e.partition_id) else {
            return Sent::Refused(
                "the partition id is not a valid header value, so the event can never be sent"
                    .into(),
            );
        };
        extra.insert("feed-partition-id", partition);
        extra.insert("feed-gate", HeaderValue::from(e.gate));
        extra.insert("feed-attempt", HeaderValue::from(e.attempts + 1));
        extra.insert("idempotency-key", HeaderValue::from(e.id));
        if let Ok(kind) = HeaderValue::from_str(&e.kind) {
            extra.insert("feed-event", kind);
        }
        let mut req = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone());
        if let Some(signer) = &self.signer {
            let mut signed = HeaderMap::with_capacity(4);
            let id = e.id.to_string();
            signer.sign(Kind::Event, &mut signed, &extra, &id, &body, unix_now());
            req = req.headers(signed);
        }
        let span = crate::otel::send(e);
        crate::otel::inject(&span, &mut extra);
        match req
            .headers(extra)
            .body(body)
            .send()
            .instrument(span.clone())
            .await
        {
            Ok(r) => {
                crate::otel::answered(&span, r.status().as_u16());
                answered(r.status(), retry_after(r.headers()))
            }
            Err(e) if e.is_timeout() => {
                crate::otel::failed(&span, "timeout");
                Sent::Retry(
                    "the receiver did not answer within --request-timeout".into(),
                    None,
                )
            }
            Err(e) => {
                crate::otel::failed(&span, "unreachable");
                Sent::Retry(format!("events request failed: {}", error_chain(&e)), None)
            }
        }
    }

    /// Refreshes the gauges of pending and failed events.
    async fn gauges(&self) {
        if let Ok((pending, failed)) = self.store.event_backlog(None).await {
            self.metrics.events_pending.set(pending);
            self.metrics.events_undeliverable.set(failed);
        }
    }
}

/// What an HTTP status means for an event: 2xx delivered; 408, 429 and
/// 5xx tried again; anything else (other 4xx, a redirect) refused for good,
/// as for items.
fn answered(status: StatusCode, retry_after: Option<Duration>) -> Sent {
    if status.is_success() {
        Sent::Delivered
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        Sent::Retry(format!("the receiver answered {status}"), retry_after)
    } else {
        Sent::Refused(format!(
            "the receiver answered {status}; fix the receiver, then run `processor events retry`"
        ))
    }
}

/// The wait before an event's next attempt: `Retry-After` when the
/// receiver sent one, else the backoff of `attempt`; never below `base`
/// (a `Retry-After: 0` must not make a hot loop) nor above `cap`.
fn retry_delay(after: Option<Duration>, base: Duration, cap: Duration, attempt: u32) -> Duration {
    let wait = after.unwrap_or_else(|| backoff::delay(base, cap, attempt));
    wait.clamp(base, cap.max(base))
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::handler::parse_retry_after)
}

/// Epoch milliseconds as RFC 3339 (UTC).
fn occurred_at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_times() {
        assert!(matches!(answered(StatusCode::OK, None), Sent::Delivered));
        assert!(matches!(
            answered(StatusCode::NO_CONTENT, None),
            Sent::Delivered
        ));
        let later = Some(Duration::from_secs(3));
        assert!(matches!(
            answered(StatusCode::TOO_MANY_REQUESTS, later),
            Sent::Retry(_, Some(d)) if d == Duration::from_secs(3)
        ));
        assert!(matches!(
            answered(StatusCode::BAD_GATEWAY, None),
            Sent::Retry(_, None)
        ));
        assert!(matches!(
            answered(StatusCode::REQUEST_TIMEOUT, None),
            Sent::Retry(..)
        ));
        assert!(
            matches!(answered(StatusCode::GONE, None), Sent::Refused(m) if m.contains("events retry"))
        );
        assert!(matches!(
            answered(StatusCode::FOUND, None),
            Sent::Refused(_)
        ));
        assert_eq!(occurred_at(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn every_retry_waits_at_least_the_backoff_base() {
        let (base, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        for attempt in 1..30 {
            for after in [None, Some(Duration::ZERO), Some(Duration::from_millis(10))] {
                let d = retry_delay(after, base, cap, attempt);
                assert!(d >= base && d <= cap, "{after:?} {attempt}: {d:?}");
            }
        }
        let later = Some(Duration::from_secs(5));
        assert_eq!(retry_delay(later, base, cap, 1), Duration::from_secs(5));
        let far = Some(Duration::from_secs(600));
        assert_eq!(retry_delay(far, base, cap, 1), cap);
    }
}
