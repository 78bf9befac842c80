//! The handler side: the [`Handler`] trait that turns an item into an
//! [`Outcome`], and [`HttpHandler`], which POSTs the item to the user's
//! HTTP handler and reads its answer (README: The handler protocol).

use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use sha2::Sha256;

use crate::{Config, Error, Result};

/// One delivery of an item to a handler.
#[derive(Clone, Debug)]
pub struct Job {
    /// Item id (`Feed-Item-Id`).
    pub item_id: String,
    /// Partition id (`Feed-Partition-Id`).
    pub partition_id: String,
    /// The item's gate, which is its partition's gate (`Feed-Gate`).
    pub gate: i64,
    /// 1-based attempt of the current step (`Feed-Attempt`).
    pub attempt: u32,
    /// Stable across redeliveries of the same step (`Idempotency-Key`).
    pub idempotency_key: String,
    /// The session that dispatched it (`Feed-Processor-Id`).
    pub processor_id: String,
    /// The item's data, forwarded unchanged.
    pub data: Vec<u8>,
}

/// What a handler made of one delivery.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A valid answer: the next gate (None = unchanged), whether the item
    /// is done, and its new data (None = unchanged).
    Step {
        /// Next gate.
        gate: Option<i64>,
        /// Terminal state reached.
        done: bool,
        /// Replacement data.
        data: Option<Vec<u8>>,
    },
    /// A failed attempt.
    Failed {
        /// What went wrong, stored in `last_error`.
        message: String,
        /// False = fail the item now, whatever attempts are left.
        retry: bool,
        /// The handler's `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// The handler could not be reached at all: no attempt is counted and
    /// dispatch pauses until it is back.
    Unreachable {
        /// Why (connection refused, DNS…).
        message: String,
    },
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
///         Outcome::Step { gate: None, done: true, data: Some(text.into_bytes()) }
///     }
/// }
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery.
    async fn handle(&self, job: &Job) -> Outcome;
}

/// POSTs items to an HTTP handler.
pub struct HttpHandler {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    secret: Option<Vec<u8>>,
    max_bytes: usize,
}

impl HttpHandler {
    /// Builds the client from the configuration: timeout, no redirects,
    /// fixed headers (marked sensitive so they never show in debug output).
    pub fn new(config: &Config) -> Result<Self> {
        let url = reqwest::Url::parse(&config.handler_url).map_err(|e| {
            Error::Config(format!(
                "--handler-url {:?} is not a URL ({e}); use e.g. http://127.0.0.1:9000/feed",
                config.handler_url
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::Config(format!(
                "--handler-url must be http:// or https://, not {}:",
                url.scheme()
            )));
        }
        let mut headers = HeaderMap::new();
        let ct = HeaderValue::from_str(&config.content_type)
            .map_err(|_| Error::Config("--content-type is not a valid header value".into()))?;
        headers.insert(reqwest::header::CONTENT_TYPE, ct);
        for (name, value) in &config.headers {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                Error::Config(format!("--header name {name:?} is not a valid header name"))
            })?;
            let mut v = HeaderValue::from_str(value).map_err(|_| {
                Error::Config(format!(
                    "--header {name}: the value is not a valid header value"
                ))
            })?;
            v.set_sensitive(true);
            headers.append(n, v);
        }
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(config.concurrency)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url,
            headers,
            secret: config.signing_secret.clone().map(String::into_bytes),
            max_bytes: config.max_response_bytes,
        })
    }

    async fn call(&self, job: &Job) -> std::result::Result<Outcome, reqwest::Error> {
        let mut req = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header("Feed-Item-Id", &job.item_id)
            .header("Feed-Partition-Id", &job.partition_id)
            .header("Feed-Gate", job.gate.to_string())
            .header("Feed-Attempt", job.attempt.to_string())
            .header("Feed-Processor-Id", &job.processor_id)
            .header("Idempotency-Key", &job.idempotency_key);
        if let Some(secret) = &self.secret {
            req = req.header("Feed-Signature", signature(secret, unix_now(), &job.data));
        }
        let mut resp = req.body(job.data.clone()).send().await?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > self.max_bytes {
                return Ok(Outcome::Failed {
                    message: format!(
                        "handler response body exceeds the {} byte cap; answer with less data",
                        self.max_bytes
                    ),
                    retry: true,
                    retry_after,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(parse_response(status, &body, retry_after))
    }
}

#[async_trait]
impl Handler for HttpHandler {
    async fn handle(&self, job: &Job) -> Outcome {
        match self.call(job).await {
            Ok(outcome) => outcome,
            Err(e) if e.is_connect() => Outcome::Unreachable {
                message: format!("handler unreachable: {}", error_chain(&e)),
            },
            Err(e) if e.is_timeout() => Outcome::Failed {
                message: "handler did not answer within --request-timeout".into(),
                retry: true,
                retry_after: None,
            },
            Err(e) => Outcome::Failed {
                message: format!("handler request failed: {}", error_chain(&e)),
                retry: true,
                retry_after: None,
            },
        }
    }
}

/// The error with its causes, without the URL (which may carry credentials).
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.without_url_ref().to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let mut text = self.to_string();
        if let Some(u) = self.url() {
            text = text.replace(&format!(" for url ({u})"), "");
        }
        text
    }
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`.
pub fn signature(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// `Retry-After` as delay-seconds or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
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

/// The answer's fields. `complete` and `response` are Go Feed's names.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    gate: Option<serde_json::Value>,
    #[serde(default, alias = "complete")]
    done: Option<serde_json::Value>,
    #[serde(default, alias = "response")]
    data: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Reads a handler's response into an outcome (README: The handler protocol).
pub fn parse_response(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> Outcome {
    let failed = |message: String, retry: bool| Outcome::Failed {
        message,
        retry,
        retry_after,
    };
    // Only a JSON object is an answer (serde would read an array as a tuple).
    let answer: Option<Answer> = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .filter(serde_json::Value::is_object)
        .and_then(|v| serde_json::from_value(v).ok());
    // The status decides whether an attempt may be retried; the body's
    // `no_retry` can only make a retryable failure final, never the reverse.
    let code = status.as_u16();
    let retryable_status =
        status.is_success() || code == 408 || code == 429 || status.is_server_error();
    if let Some(err) = answer.as_ref().and_then(|a| a.error.as_ref()) {
        let message = err
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| err.to_string());
        let no_retry = err.get("no_retry").and_then(|v| v.as_bool()) == Some(true);
        return failed(
            format!("handler error (HTTP {code}): {message}"),
            retryable_status && !no_retry,
        );
    }
    if !status.is_success() {
        let retry = retryable_status;
        let why = if status.is_redirection() {
            "redirects are not followed; point --handler-url at the final address"
        } else if retry {
            "will retry"
        } else {
            "not retried"
        };
        return failed(
            format!("handler answered HTTP {code} ({why}){}", snippet(body)),
            retry,
        );
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Outcome::Step {
            gate: None,
            done: true,
            data: None,
        };
    }
    let Some(answer) = answer else {
        return failed(
            format!(
                "handler answered HTTP {} with a body that is not a JSON object{}; \
                 expected {{\"gate\": int, \"done\": bool, \"data\": any}} or an empty body",
                status.as_u16(),
                snippet(body)
            ),
            true,
        );
    };
    let gate = match answer.gate {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(g) if g >= 0 => Some(g),
            _ => {
                return failed(
                    format!("handler answered \"gate\": {v}; it must be a non-negative integer"),
                    true,
                );
            }
        },
    };
    let done = match answer.done {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => b,
        Some(v) => {
            return failed(
                format!("handler answered \"done\": {v}; it must be true or false"),
                true,
            );
        }
    };
    let data = match answer.data {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(serde_json::to_vec(&v).expect("a JSON value serializes")),
    };
    Outcome::Step { gate, done, data }
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
mod tests {
    use super::*;

    fn ok(body: &str) -> Outcome {
        parse_response(StatusCode::OK, body.as_bytes(), None)
    }

    #[test]
    fn answers() {
        assert_eq!(
            ok(""),
            Outcome::Step {
                gate: None,
                done: true,
                data: None
            }
        );
        assert_eq!(
            ok(r#"{"gate": 2, "done": false, "data": {"a": 1}}"#),
            Outcome::Step {
                gate: Some(2),
                done: false,
                data: Some(br#"{"a":1}"#.to_vec())
            }
        );
        assert_eq!(
            ok(r#"{"complete": true, "response": [1]}"#),
            Outcome::Step {
                gate: None,
                done: true,
                data: Some(b"[1]".to_vec())
            }
        );
        assert!(matches!(
            ok(r#"{"gate": "x"}"#),
            Outcome::Failed { retry: true, .. }
        ));
        assert!(matches!(
            ok(r#"{"gate": -1}"#),
            Outcome::Failed { retry: true, .. }
        ));
        assert!(matches!(
            ok(r#"{"done": "yes"}"#),
            Outcome::Failed { retry: true, .. }
        ));
        assert!(matches!(
            ok("not json"),
            Outcome::Failed { retry: true, .. }
        ));
    }

    #[test]
    fn errors_and_statuses() {
        let e = parse_response(
            StatusCode::OK,
            br#"{"error": {"message": "bad pdf", "no_retry": true}}"#,
            None,
        );
        assert!(
            matches!(e, Outcome::Failed { retry: false, ref message, .. } if message.contains("bad pdf"))
        );
        // A non-retryable status stays final whatever the body says.
        let e = parse_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            br#"{"error": {"message": "unprocessable"}}"#,
            None,
        );
        assert!(
            matches!(e, Outcome::Failed { retry: false, ref message, .. } if message.contains("unprocessable"))
        );
        let e = parse_response(
            StatusCode::SERVICE_UNAVAILABLE,
            br#"{"error": {"message": "busy"}}"#,
            None,
        );
        assert!(matches!(e, Outcome::Failed { retry: true, .. }));
        for (code, retry) in [
            (408, true),
            (429, true),
            (503, true),
            (404, false),
            (422, false),
            (302, false),
        ] {
            let s = StatusCode::from_u16(code).unwrap();
            assert!(
                matches!(parse_response(s, b"", None), Outcome::Failed { retry: r, .. } if r == retry),
                "{code}"
            );
        }
    }

    #[test]
    fn retry_after_and_signature() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        let later = std::time::SystemTime::now() + Duration::from_secs(100);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(d > Duration::from_secs(90) && d <= Duration::from_secs(100));
        assert_eq!(parse_retry_after("soon"), None);
        // Reference value: printf '1.{}' | openssl dgst -sha256 -hmac k
        assert_eq!(
            signature(b"k", 1, b"{}"),
            "t=1,v1=3dd49b2593d0f9a349e9e71c4bde3e2b862c2be4003fe9b4ba81332029310158"
        );
    }
}
