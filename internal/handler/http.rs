//! [`HttpHandler`]: POSTs one item, or a batch of items, to the user's
//! HTTP handler. The URL and the fixed headers are parsed once, at start,
//! with [`crate::client`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::answer::{parse_batch_response, parse_response, parse_retry_after};
use super::keys::{batch_webhook_id, webhook_id};
use super::sign::{Kind, Signer};
use super::{Handler, Job, Outcome};
use crate::client::{HandlerClient, causes, endpoint, fixed_headers, handler_client, unix_now};
use crate::config::HandlerConfig;
use crate::{Error, Result};

/// POSTs items to an HTTP handler.
pub struct HttpHandler {
    client: HandlerClient,
    uri: http::Uri,
    headers: HeaderMap,
    /// Signs each request; None = unsigned.
    signer: Option<Signer>,
    timeout: Duration,
    max_bytes: usize,
    budget: Arc<Semaphore>,
    /// The whole budget, in units.
    budget_units: usize,
}

/// Answers up to this size are read without a share of the response
/// budget: most answers are this small, and `--concurrency` of them hold
/// little.
const FREE_BYTES: usize = 64 << 10;

/// The response budget counts in KiB (a semaphore counts in `u32`).
const UNIT: usize = 1 << 10;

/// A response read up to the byte cap: its status, body and `Retry-After`.
struct Answered {
    status: StatusCode,
    /// Holds its share of the response budget until the last slice of it
    /// (the stored data of its items) is dropped, after the write.
    body: Bytes,
    retry_after: Option<Duration>,
}

/// A body that holds a share of the response budget.
struct Held {
    body: Vec<u8>,
    _room: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl HttpHandler {
    /// Builds the client from the configuration: timeout, no redirects,
    /// fixed headers (marked sensitive so they never show in debug output).
    pub fn new(config: &HandlerConfig) -> Result<Self> {
        let url = endpoint("--handler-url", &config.url)?;
        let uri = url.as_str().parse::<http::Uri>().map_err(|e| {
            Error::Config(format!(
                "--handler-url {} is not a URI ({e}); use e.g. http://127.0.0.1:9000/feed",
                crate::store::redact(&config.url)
            ))
        })?;
        let headers = fixed_headers(&config.content_type, &config.headers, "--header")?;
        let client = handler_client(config.request_timeout, config.concurrency)?;
        let budget_units = (config.response_budget_bytes / UNIT).clamp(1, u32::MAX as usize);
        Ok(Self {
            client,
            uri,
            headers,
            signer: Signer::new(
                "--signing-secret",
                &config.signing_secrets,
                config.signature_scheme,
                config.signature_v1,
            )?,
            timeout: config.request_timeout,
            max_bytes: config.max_response_bytes,
            budget: Arc::new(Semaphore::new(budget_units)),
            budget_units,
        })
    }

    /// Waits for room for `bytes` more bytes of answers (at most the
    /// whole budget), so that the answers held at once stay within it.
    async fn room(&self, bytes: usize) -> OwnedSemaphorePermit {
        let units = bytes.div_ceil(UNIT).clamp(1, self.budget_units);
        self.budget
            .clone()
            .acquire_many_owned(u32::try_from(units).unwrap_or(u32::MAX))
            .await
            .expect("the response budget is never closed")
    }

    /// POSTs `body` with the fixed headers, `extra` and the signatures (`id`
    /// is its `webhook-id`), and reads the answer up to the byte cap, all
    /// within `--request-timeout`; Err = the outcome of every item of the
    /// request (no answer, or one too large). Traced as an HTTP client span.
    async fn post(
        &self,
        extra: HeaderMap,
        id: &str,
        body: Bytes,
    ) -> std::result::Result<Answered, Outcome> {
        let span = crate::otel::client(&self.uri);
        let exchange = self.exchange(extra, id, body, &span);
        match tokio::time::timeout(self.timeout, exchange)
            .instrument(span.clone())
            .await
        {
            Ok(Ok(answered)) => {
                crate::otel::answered(&span, answered.status.as_u16());
                Ok(answered)
            }
            Ok(Err(failed)) => {
                crate::otel::failed(&span, failed.error_type().unwrap_or("error"));
                Err(failed)
            }
            Err(_) => {
                crate::otel::failed(&span, "timeout");
                Err(Outcome::retry("handler did not answer within --request-timeout").outage())
            }
        }
    }

    async fn exchange(
        &self,
        extra: HeaderMap,
        id: &str,
        body: Bytes,
        span: &tracing::Span,
    ) -> std::result::Result<Answered, Outcome> {
        let mut req = http::Request::new(Full::new(body.clone()));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = self.uri.clone();
        let headers = req.headers_mut();
        headers.clone_from(&self.headers);
        if let Some(signer) = &self.signer {
            signer.sign(Kind::Item, headers, &extra, id, &body, unix_now());
        }
        drop(body);
        headers.extend(extra);
        crate::otel::inject(span, headers);
        let resp = self.client.request(req).await.map_err(|e| {
            let chain = causes(&e);
            if e.is_connect() {
                Outcome::unreachable(format!("handler unreachable: {chain}"))
            } else {
                Outcome::retry(format!("handler request failed: {chain}")).outage()
            }
        })?;
        let failed = |e: hyper::Error| {
            Outcome::retry(format!("handler request failed: {}", causes(&e))).outage()
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let too_large = || {
            let message = format!(
                "handler response body exceeds the {} byte cap; answer with less data",
                self.max_bytes
            );
            match retry_after {
                Some(d) => Outcome::retry(message).after(d),
                None => Outcome::retry(message),
            }
        };
        // A known length takes its room before the first byte; an unknown
        // one past FREE_BYTES takes room for the largest answer allowed.
        // The buffer is sized once (its untouched pages cost no memory), so
        // it is never copied while it grows.
        let length = resp.body().size_hint().exact().map(|n| n as usize);
        let mut room = match length {
            Some(n) if n > self.max_bytes => return Err(too_large()),
            Some(n) if n > FREE_BYTES => Some(self.room(n).await),
            _ => None,
        };
        let mut incoming = resp.into_body();
        let mut body = Vec::with_capacity(length.unwrap_or(0));
        while let Some(frame) = incoming.frame().await {
            let Ok(chunk) = frame.map_err(failed)?.into_data() else {
                continue;
            };
            let len = body.len() + chunk.len();
            if len > self.max_bytes {
                return Err(too_large());
            }
            if room.is_none() && len > FREE_BYTES {
                room = Some(self.room(self.max_bytes).await);
                body.reserve_exact(self.max_bytes - body.len());
            }
            body.extend_from_slice(&chunk);
        }
        let body = match room {
            Some(room) => Bytes::from_owner(Held { body, _room: room }),
            None => Bytes::from(body),
        };
        Ok(Answered {
            status,
            body,
            retry_after,
        })
    }
}

/// A header value from an id the database holds. One that cannot be a
/// header value (a control character in it, written with plain SQL) can
/// never be sent: the item fails at once instead of being retried.
fn value(name: &str, text: &str) -> std::result::Result<HeaderValue, Outcome> {
    HeaderValue::from_str(text).map_err(|_| {
        Outcome::fail(format!(
            "handler request failed: {name} {text:?} is not a valid header value, so it can never be sent; \
             give the item an id without control characters"
        ))
    })
}

/// Feed's header names, built once: inserting a `&str` name copies it
/// into a new allocation on every request.
const ITEM_ID: HeaderName = HeaderName::from_static("feed-item-id");
const PARTITION_ID: HeaderName = HeaderName::from_static("feed-partition-id");
const GATE: HeaderName = HeaderName::from_static("feed-gate");
const ATTEMPT: HeaderName = HeaderName::from_static("feed-attempt");
const PROCESSOR_ID: HeaderName = HeaderName::from_static("feed-processor-id");
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const BATCH: HeaderName = HeaderName::from_static("feed-batch");
const INPUTS: HeaderName = HeaderName::from_static("feed-inputs");

/// The per-item headers of a single-item request.
fn item_headers(job: &Job) -> std::result::Result<HeaderMap, Outcome> {
    let mut h = HeaderMap::with_capacity(7);
    h.insert(ITEM_ID, value("Feed-Item-Id", &job.item_id)?);
    h.insert(PARTITION_ID, value("Feed-Partition-Id", &job.partition_id)?);
    h.insert(GATE, HeaderValue::from(job.gate));
    h.insert(ATTEMPT, HeaderValue::from(job.attempt));
    h.insert(PROCESSOR_ID, value("Feed-Processor-Id", &job.processor_id)?);
    h.insert(
        IDEMPOTENCY_KEY,
        value("Idempotency-Key", &job.idempotency_key)?,
    );
    if let Some(url) = &job.inputs {
        h.insert(INPUTS, value("Feed-Inputs", url)?);
    }
    Ok(h)
}

#[async_trait]
impl Handler for HttpHandler {
    async fn handle(&self, job: &Job) -> Outcome {
        let h = match item_headers(job) {
            Ok(h) => h,
            Err(failed) => return failed,
        };
        let id = match self.signer.as_ref().is_some_and(Signer::standard) {
            true => webhook_id(&job.idempotency_key),
            false => "".into(),
        };
        match self.post(h, &id, job.data.clone()).await {
            Ok(a) => parse_response(a.status, &a.body, a.retry_after),
            Err(failed) => failed,
        }
    }

    async fn handle_batch(&self, jobs: &[Job]) -> Vec<Outcome> {
        let Some(first) = jobs.first() else {
            return Vec::new();
        };
        let mut h = HeaderMap::with_capacity(2);
        h.insert(BATCH, HeaderValue::from(jobs.len()));
        match value("Feed-Processor-Id", &first.processor_id) {
            Ok(v) => h.insert(PROCESSOR_ID, v),
            Err(failed) => return vec![failed; jobs.len()],
        };
        let id = match self.signer.as_ref().is_some_and(Signer::standard) {
            true => batch_webhook_id(jobs.iter().map(|j| j.idempotency_key.as_str())),
            false => String::new(),
        };
        let answered = self.post(h, &id, Bytes::from(batch_body(jobs))).await;
        let outcome = match answered
            .map(|a| parse_batch_response(a.status, &a.body, a.retry_after, jobs.len()))
        {
            Ok(Ok(each)) => return each,
            Ok(Err(failed)) | Err(failed) => failed,
        };
        vec![outcome; jobs.len()]
    }
}

/// The batch request's body: a JSON array of one object per job, its data
/// embedded as JSON when it is JSON and as `data_base64` otherwise.
pub(crate) fn batch_body(jobs: &[Job]) -> Vec<u8> {
    let size: usize = jobs.iter().map(|j| j.data.len() + 160).sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'[');
    for (i, j) in jobs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let text = |out: &mut Vec<u8>, s: &str| {
            serde_json::to_writer(out, s).expect("a string serializes");
        };
        out.extend_from_slice(b"{\"id\":");
        text(&mut out, &j.item_id);
        out.extend_from_slice(b",\"partition_id\":");
        text(&mut out, &j.partition_id);
        out.extend_from_slice(format!(",\"gate\":{},\"attempt\":{}", j.gate, j.attempt).as_bytes());
        out.extend_from_slice(b",\"idempotency_key\":");
        text(&mut out, &j.idempotency_key);
        if let Some(url) = &j.inputs {
            out.extend_from_slice(b",\"inputs\":");
            text(&mut out, url);
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(&j.data).is_ok() {
            out.extend_from_slice(b",\"data\":");
            out.extend_from_slice(&j.data);
        } else {
            out.extend_from_slice(b",\"data_base64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(&j.data)
                    .as_bytes(),
            );
            out.push(b'"');
        }
        out.push(b'}');
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, data: &[u8]) -> Job {
        Job {
            item_id: id.into(),
            partition_id: "p".into(),
            gate: 2,
            attempt: 1,
            idempotency_key: format!("{id}:1"),
            processor_id: "s".into(),
            data: Bytes::copy_from_slice(data),
            inputs: None,
        }
    }

    #[test]
    fn batch_body_embeds_json_and_encodes_the_rest() {
        let mut a = job("a", br#"{"x": [1]}"#);
        a.inputs = Some("http://127.0.0.1:8080/inputs/p?gate=2".into());
        let body = batch_body(&[a, job("b", b"\xff not json")]);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"id": "a", "partition_id": "p", "gate": 2, "attempt": 1,
                 "idempotency_key": "a:1", "inputs": "http://127.0.0.1:8080/inputs/p?gate=2",
                 "data": {"x": [1]}},
                {"id": "b", "partition_id": "p", "gate": 2, "attempt": 1,
                 "idempotency_key": "b:1", "data_base64": "/yBub3QganNvbg=="},
            ])
        );
    }
}
