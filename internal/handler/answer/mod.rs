//! Reading a handler's answer, one item's or a batch's (the book:
//! Writing a handler).

use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Outcome, PartitionEnd};
use crate::validate::MAX_GATE;

mod children;

/// `Retry-After` as delay-seconds or an HTTP date.
pub(crate) fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The answer's fields, each kept as the raw JSON text it was sent as: no
/// tree of the data is built, and `data` is stored as a slice of the body.
/// `complete` and `response` are Go Feed's names.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(default, borrow)]
    gate: Option<&'a RawValue>,
    #[serde(default, borrow, alias = "complete")]
    done: Option<&'a RawValue>,
    #[serde(default, borrow, alias = "response")]
    data: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    partition: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reason: Option<&'a RawValue>,
    #[serde(default, borrow)]
    items: Option<&'a RawValue>,
}

/// `{"error": {"message": …, "no_retry": …}}`'s inner object.
#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default)]
    no_retry: Option<bool>,
}

/// Whether a status allows a retry: 2xx, 408, 429 and 5xx.
fn retryable(status: StatusCode) -> bool {
    let code = status.as_u16();
    status.is_success() || code == 408 || code == 429 || status.is_server_error()
}

/// The first byte of `body` that is not whitespace.
fn first_byte(body: &[u8]) -> Option<u8> {
    body.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// `raw` read as an answer object: None when it is not a JSON object
/// (serde would read an array as a tuple), Err when it is one with fields
/// of the wrong JSON shape.
fn answer(raw: &[u8]) -> Option<Result<Answer<'_>, ()>> {
    (first_byte(raw) == Some(b'{')).then(|| serde_json::from_slice(raw).map_err(|_| ()))
}

/// Reads a handler's response into an outcome (the book: Writing a handler).
pub(super) fn parse_response(
    status: StatusCode,
    body: &Bytes,
    retry_after: Option<Duration>,
) -> Outcome {
    let parsed = answer(body);
    if let Some(Ok(a)) = &parsed
        && let Some(failed) = error_answer(status, a, retry_after)
    {
        return failed;
    }
    if !status.is_success() {
        return status_failed(status, body, retry_after);
    }
    if first_byte(body).is_none() {
        return Outcome::done();
    }
    match parsed {
        Some(Ok(a)) => step(&a, body, retry_after),
        Some(Err(())) => failed_attempt(
            "handler answered an object that is not {gate, done, data}".into(),
            retry_after,
        ),
        None => failed_attempt(
            format!(
                "handler answered HTTP {} with a body that is not a JSON object{}; \
                 expected {{\"gate\": int, \"done\": bool, \"data\": any}} or an empty body",
                status.as_u16(),
                snippet(body)
            ),
            retry_after,
        ),
    }
}

/// Reads the answer to a batch of `count` items: one outcome per item, or
/// (Err) the one outcome of every item when the answer as a whole is not
/// valid: a non-2xx status, a body that is not an array of `count`.
pub(super) fn parse_batch_response(
    status: StatusCode,
    body: &Bytes,
    retry_after: Option<Duration>,
    count: usize,
) -> Result<Vec<Outcome>, Outcome> {
    if let Some(Ok(a)) = answer(body)
        && let Some(failed) = error_answer(status, &a, retry_after)
    {
        return Err(failed);
    }
    if !status.is_success() {
        return Err(status_failed(status, body, retry_after));
    }
    if first_byte(body).is_none() {
        return Ok(vec![Outcome::done(); count]);
    }
    let answers = (first_byte(body) == Some(b'['))
        .then(|| serde_json::from_slice::<Vec<&RawValue>>(body).ok())
        .flatten();
    let Some(answers) = answers else {
        return Err(failed_attempt(
            format!(
                "handler answered a batch of {count} with a body that is not a JSON array{}; \
                 expected an array of {count} answers or an empty body",
                snippet(body)
            ),
            retry_after,
        ));
    };
    if answers.len() != count {
        return Err(failed_attempt(
            format!(
                "handler answered a batch of {count} with an array of {}; \
                 expected one answer per item, in order",
                answers.len()
            ),
            retry_after,
        ));
    }
    Ok(answers
        .into_iter()
        .enumerate()
        .map(|(i, raw)| {
            let text = raw.get();
            let empty = text.bytes().filter(|b| !b.is_ascii_whitespace()).eq(*b"{}");
            match answer(text.as_bytes()) {
                _ if text == "null" || empty => Outcome::done(),
                Some(Ok(a)) => error_answer(status, &a, retry_after)
                    .unwrap_or_else(|| step(&a, body, retry_after)),
                Some(Err(())) => failed_attempt(
                    format!("handler's answer {i} of the batch is not {{gate, done, data}}"),
                    retry_after,
                ),
                None => failed_attempt(
                    format!(
                        "handler's answer {i} of the batch is {}, not an object or null",
                        text
                    ),
                    retry_after,
                ),
            }
        })
        .collect())
}

/// A failed attempt that may be retried.
fn failed_attempt(message: String, retry_after: Option<Duration>) -> Outcome {
    Outcome::Failed {
        message,
        retry: true,
        retry_after,
        outage: false,
        throttled: false,
        missing: None,
    }
}

/// The failed attempt an `{"error": …}` answer stands for. The status
/// decides whether it may be retried; the body's `no_retry` can only make
/// a retryable failure final, never the reverse.
fn error_answer(status: StatusCode, a: &Answer, retry_after: Option<Duration>) -> Option<Outcome> {
    let err = a.error.filter(|e| e.get() != "null")?;
    let inner = (first_byte(err.get().as_bytes()) == Some(b'{'))
        .then(|| serde_json::from_str::<ErrorBody>(err.get()).ok())
        .flatten();
    let message = match inner.as_ref().and_then(|e| e.message) {
        Some(m) => serde_json::from_str::<String>(m.get()).unwrap_or_else(|_| m.get().to_owned()),
        None => err.get().to_owned(),
    };
    let no_retry = inner.and_then(|e| e.no_retry) == Some(true);
    Some(Outcome::Failed {
        message: format!("handler error (HTTP {}): {}", status.as_u16(), message),
        retry: retryable(status) && !no_retry,
        retry_after,
        outage: away(status),
        throttled: throttled(status, retry_after),
        missing: missing(status),
    })
}

/// The failed attempt a non-2xx status without an error answer stands for.
/// Its message says what the handler answered, not what happens next: the
/// policy adds that ("not retried", or the attempts used up), as it alone
/// knows whether an attempt is left.
fn status_failed(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> Outcome {
    let hint = if status.is_redirection() {
        " (redirects are not followed; point --handler-url at the final address)"
    } else {
        ""
    };
    Outcome::Failed {
        message: format!(
            "handler answered HTTP {}{hint}{}",
            status.as_u16(),
            snippet(body)
        ),
        retry: retryable(status),
        retry_after,
        outage: away(status),
        throttled: throttled(status, retry_after),
        missing: missing(status),
    }
}

/// Whether a status says "the handler is not there" rather than "the
/// handler failed this item": 502, 503 and 504 come from a proxy or a
/// service that is down or deploying. A 500 (or any other status) is the
/// handler's own answer, an attempt like any other.
fn away(status: StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
}

/// The status when it is 404 or 405: a handler that answers it for every
/// item is not there at that URL (a wrong path, or a URL that only serves
/// GET); one item's 404 among answers is that item's own (the circuit
/// breaker tells them apart).
fn missing(status: StatusCode) -> Option<u16> {
    matches!(status.as_u16(), 404 | 405).then_some(status.as_u16())
}

/// Whether a status says "too many": 429, or 503 with `Retry-After`.
fn throttled(status: StatusCode, retry_after: Option<Duration>) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::SERVICE_UNAVAILABLE && retry_after.is_some())
}

/// One answer object `{gate, done, data}` as a step; its data is a slice
/// of `body`, which holds it.
fn step(a: &Answer, body: &Bytes, retry_after: Option<Duration>) -> Outcome {
    let null = |v: Option<&RawValue>| v.is_none_or(|v| v.get() == "null");
    let gate = if null(a.gate) {
        None
    } else {
        let raw = a.gate.map_or("", RawValue::get);
        match serde_json::from_str::<i64>(raw) {
            Ok(g) if (0..=MAX_GATE).contains(&g) => Some(g),
            _ => {
                return failed_attempt(
                    format!(
                        "handler answered \"gate\": {}; it must be an integer from 0 to 2^53",
                        raw
                    ),
                    retry_after,
                );
            }
        }
    };
    // An answer that leaves `done` out is done unless it names a gate to
    // move to: `{"data": …}` is a result, as an empty body is, not a
    // request to be called again.
    let done = if null(a.done) {
        gate.is_none()
    } else {
        let raw = a.done.map_or("", RawValue::get);
        match serde_json::from_str::<bool>(raw) {
            Ok(b) => b,
            Err(_) => {
                return failed_attempt(
                    format!(
                        "handler answered \"done\": {}; it must be true or false",
                        raw
                    ),
                    retry_after,
                );
            }
        }
    };
    let data = a
        .data
        .filter(|d| d.get() != "null")
        .map(|d| body.slice_ref(d.get().as_bytes()));
    let mut step = Outcome::step(gate, done, data);
    if let Some(items) = a.items {
        match children::children(items, body) {
            Ok(spawned) => step = step.spawning(spawned),
            Err(message) => return failed_attempt(message, retry_after),
        }
    }
    if null(a.partition) {
        return step;
    }
    if matches!(&step, Outcome::Step { children, .. } if !children.is_empty()) {
        return failed_attempt(
            "handler answered both \"partition\" and \"items\": an answer that ends its partition \
             cannot add items to it; send one or the other"
                .into(),
            retry_after,
        );
    }
    let word = a.partition.map_or("", RawValue::get);
    let Some(end) = serde_json::from_str::<&str>(word)
        .ok()
        .and_then(PartitionEnd::parse)
    else {
        return failed_attempt(
            format!(
                "handler answered \"partition\": {}; it must be \"complete\", \"cancel\" or \"fail\"",
                crate::validate::shown(word)
            ),
            retry_after,
        );
    };
    let reason = match a.reason.filter(|r| r.get() != "null") {
        None => None,
        Some(r) => match serde_json::from_str::<String>(r.get()) {
            Ok(text) => Some(text),
            Err(_) => {
                return failed_attempt(
                    format!(
                        "handler answered \"reason\": {}; it must be a string",
                        crate::validate::shown(r.get())
                    ),
                    retry_after,
                );
            }
        },
    };
    step.ending(end, reason)
}

/// The start of a response body for an error message.
fn snippet(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    format!(": {}", text.trim())
}

#[cfg(test)]
mod tests;
