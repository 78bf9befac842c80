//! Reading a handler's answer, one item's or a batch's (README: The
//! handler protocol), and signing requests.

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde::Deserialize;
use sha2::Sha256;

use super::Outcome;

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
}

/// Whether a status allows a retry: 2xx, 408, 429 and 5xx.
fn retryable(status: StatusCode) -> bool {
    let code = status.as_u16();
    status.is_success() || code == 408 || code == 429 || status.is_server_error()
}

/// Reads a handler's response into an outcome (README: The handler protocol).
pub fn parse_response(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> Outcome {
    let value = serde_json::from_slice::<serde_json::Value>(body).ok();
    if let Some(failed) = error_answer(status, value.as_ref(), retry_after) {
        return failed;
    }
    if !status.is_success() {
        return status_failed(status, body, retry_after);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Outcome::done();
    }
    match value {
        // Only a JSON object is an answer (serde would read an array as a tuple).
        Some(v @ serde_json::Value::Object(_)) => step(v, retry_after),
        _ => Outcome::Failed {
            message: format!(
                "handler answered HTTP {} with a body that is not a JSON object{}; \
                 expected {{\"gate\": int, \"done\": bool, \"data\": any}} or an empty body",
                status.as_u16(),
                snippet(body)
            ),
            retry: true,
            retry_after,
        },
    }
}

/// Reads the answer to a batch of `count` items: one outcome per item, or
/// (Err) the one outcome of every item when the answer as a whole is not
/// valid: a non-2xx status, a body that is not an array of `count`.
pub fn parse_batch_response(
    status: StatusCode,
    body: &[u8],
    retry_after: Option<Duration>,
    count: usize,
) -> Result<Vec<Outcome>, Outcome> {
    let value = serde_json::from_slice::<serde_json::Value>(body).ok();
    if let Some(failed) = error_answer(status, value.as_ref(), retry_after) {
        return Err(failed);
    }
    if !status.is_success() {
        return Err(status_failed(status, body, retry_after));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(vec![Outcome::done(); count]);
    }
    let failed = |message: String| Outcome::Failed {
        message,
        retry: true,
        retry_after,
    };
    let Some(serde_json::Value::Array(answers)) = value else {
        return Err(failed(format!(
            "handler answered a batch of {count} with a body that is not a JSON array{}; \
             expected an array of {count} answers or an empty body",
            snippet(body)
        )));
    };
    if answers.len() != count {
        return Err(failed(format!(
            "handler answered a batch of {count} with an array of {}; \
             expected one answer per item, in order",
            answers.len()
        )));
    }
    Ok(answers
        .into_iter()
        .enumerate()
        .map(|(i, a)| match a {
            serde_json::Value::Null => Outcome::done(),
            serde_json::Value::Object(ref o) if o.is_empty() => Outcome::done(),
            v @ serde_json::Value::Object(_) => {
                error_answer(status, Some(&v), retry_after).unwrap_or_else(|| step(v, retry_after))
            }
            v => failed(format!(
                "handler's answer {i} of the batch is {v}, not an object or null"
            )),
        })
        .collect())
}

/// The failed attempt an `{"error": …}` answer stands for. The status
/// decides whether it may be retried; the body's `no_retry` can only make
/// a retryable failure final, never the reverse.
fn error_answer(
    status: StatusCode,
    value: Option<&serde_json::Value>,
    retry_after: Option<Duration>,
) -> Option<Outcome> {
    let err = value?.as_object()?.get("error")?;
    if err.is_null() {
        return None;
    }
    let message = err
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| err.to_string());
    let no_retry = err.get("no_retry").and_then(|v| v.as_bool()) == Some(true);
    Some(Outcome::Failed {
        message: format!("handler error (HTTP {}): {message}", status.as_u16()),
        retry: retryable(status) && !no_retry,
        retry_after,
    })
}

/// The failed attempt a non-2xx status without an error answer stands for.
fn status_failed(status: StatusCode, body: &[u8], retry_after: Option<Duration>) -> Outcome {
    let retry = retryable(status);
    let why = if status.is_redirection() {
        "redirects are not followed; point --handler-url at the final address"
    } else if retry {
        "will retry"
    } else {
        "not retried"
    };
    Outcome::Failed {
        message: format!(
            "handler answered HTTP {} ({why}){}",
            status.as_u16(),
            snippet(body)
        ),
        retry,
        retry_after,
    }
}

/// One answer object `{gate, done, data}` as a step.
fn step(v: serde_json::Value, retry_after: Option<Duration>) -> Outcome {
    let failed = |message: String| Outcome::Failed {
        message,
        retry: true,
        retry_after,
    };
    let Ok(answer) = serde_json::from_value::<Answer>(v) else {
        return failed("handler answered an object that is not {gate, done, data}".into());
    };
    let gate = match answer.gate {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(g) if g >= 0 => Some(g),
            _ => {
                return failed(format!(
                    "handler answered \"gate\": {v}; it must be a non-negative integer"
                ));
            }
        },
    };
    let done = match answer.done {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => b,
        Some(v) => {
            return failed(format!(
                "handler answered \"done\": {v}; it must be true or false"
            ));
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
        // The body's error, and whether it is retried: a non-retryable
        // status stays final whatever the body says.
        for (code, body, retry, text) in [
            (
                200,
                r#"{"error": {"message": "bad pdf", "no_retry": true}}"#,
                false,
                "bad pdf",
            ),
            (
                422,
                r#"{"error": {"message": "unprocessable"}}"#,
                false,
                "unprocessable",
            ),
            (503, r#"{"error": {"message": "busy"}}"#, true, "busy"),
        ] {
            let s = StatusCode::from_u16(code).unwrap();
            let e = parse_response(s, body.as_bytes(), None);
            assert!(
                matches!(e, Outcome::Failed { retry: r, ref message, .. } if r == retry && message.contains(text)),
                "{code} {body}: {e:?}"
            );
        }
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

    #[test]
    fn batch_answers() {
        let batch = |status: u16, body: &str, n| {
            parse_batch_response(
                StatusCode::from_u16(status).unwrap(),
                body.as_bytes(),
                None,
                n,
            )
        };
        assert_eq!(
            batch(200, " ", 2),
            Ok(vec![Outcome::done(), Outcome::done()])
        );
        let each = batch(
            200,
            r#"[null, {}, {"gate": 3}, {"error": {"message": "no", "no_retry": true}}, 7]"#,
            5,
        )
        .unwrap();
        assert_eq!(each[0], Outcome::done());
        assert_eq!(each[1], Outcome::done());
        assert_eq!(
            each[2],
            Outcome::Step {
                gate: Some(3),
                done: false,
                data: None
            }
        );
        assert!(matches!(each[3], Outcome::Failed { retry: false, .. }));
        assert!(matches!(each[4], Outcome::Failed { retry: true, .. }));
        for (status, body) in [
            (200, "[null]"),
            (200, "{}"),
            (200, "nope"),
            (503, "[null, null]"),
        ] {
            assert!(
                matches!(
                    batch(status, body, 2),
                    Err(Outcome::Failed { retry: true, .. })
                ),
                "{status} {body}"
            );
        }
        assert!(matches!(
            batch(404, "", 2),
            Err(Outcome::Failed { retry: false, .. })
        ));
    }
}
