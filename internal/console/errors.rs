//! Every failed answer of the console: the status and message for a
//! library error (database details logged, never shown), and the API's one
//! JSON shape, `{"error": {"message": …}}`; and the API's answer to a
//! store call, which is either.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::Error;

/// The HTTP status and the message to show for a library error: 404
/// unknown, 409 does not apply, 401 a token revoked meanwhile, 403 outside
/// a token's scope, 503 not ready yet or the database
/// unreachable; database details are logged, not shown.
pub(super) fn public(e: Error) -> (StatusCode, String) {
    let code = match e {
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Connect { .. } | Error::StatementTimeout(_) => {
            tracing::warn!(error = %e, "console request failed");
            let text = "the database is unreachable or does not answer; try again shortly";
            return (StatusCode::SERVICE_UNAVAILABLE, text.into());
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    if code == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::warn!(error = %e, "console request failed");
        return (code, "internal error; see the server's log".into());
    }
    (code, without_driver_text(e.to_string()))
}

/// Where a database driver's own text starts in a message (sea-orm's
/// and sqlx's words), which names tables, constraints and lines of the
/// server's code.
const DRIVER_TEXT: [&str; 5] = [
    "Execution Error",
    "Query Error",
    "Connection Error",
    "error returned from database",
    "database error:",
];

/// `message` up to any database driver's text in it, which goes to the
/// log instead: a client sees a stable message.
fn without_driver_text(message: String) -> String {
    let Some(at) = DRIVER_TEXT.iter().filter_map(|m| message.find(m)).min() else {
        return message;
    };
    tracing::warn!(error = %message, "console request refused; the database's own text is logged, not shown");
    message[..at].trim_end_matches([':', ' ', ';']).to_string()
}
/// A store call's result as the API's answer: the value as JSON, or the
/// error's JSON.
pub(crate) fn answer<T: serde::Serialize>(r: crate::Result<T>) -> Response {
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => json_error(e),
    }
}

/// A library error as a JSON answer.
pub(crate) fn json_error(e: Error) -> Response {
    let (code, message) = public(e);
    let mut r = api_error(code, &message);
    if code == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

/// Every failed API answer: `{"error": {"message": …}}` with `code`.
pub(crate) fn api_error(code: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "message": message } });
    (code, axum::Json(body)).into_response()
}

/// Refuses a body the API does not read: any `Content-Type` but JSON or
/// JSON lines answers 415. A browser sends `text/plain`, a form or
/// `multipart/form-data` to any site without asking first (no CORS
/// preflight), so a route must not read such a body as JSON. No type at
/// all is taken as JSON, as `curl` without `-H` would send it.
pub(crate) async fn json_only(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(declared) = declared {
        let essence = declared.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case("application/json")
            && !essence.eq_ignore_ascii_case("application/x-ndjson")
        {
            return api_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!(
                    "Content-Type {:?} is not read here: send application/json \
                     (or application/x-ndjson for items)",
                    crate::validate::shown(essence)
                ),
            );
        }
    }
    next.run(req).await
}

/// Turns an error the framework answered in plain text (a query that does
/// not parse, a body too large or of the wrong type, an unknown path or
/// method) into the API's JSON error, so every failure has one shape.
pub(crate) async fn json_errors(r: Response) -> Response {
    let failed = r.status().is_client_error() || r.status().is_server_error();
    let json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !failed || json {
        return r;
    }
    let code = r.status();
    let text = axum::body::to_bytes(r.into_body(), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        code.canonical_reason()
            .unwrap_or("request failed")
            .to_string()
    } else {
        text
    };
    api_error(code, &message)
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_text_is_not_shown() {
        let shown = super::without_driver_text(
            "an item id already exists; nothing was written: Execution Error: error returned \
             from database: (code: 1555) UNIQUE constraint failed: feed_items.id"
                .into(),
        );
        assert_eq!(shown, "an item id already exists; nothing was written");
        let plain = "gate 1 is not above partition p's current gate 1";
        assert_eq!(super::without_driver_text(plain.into()), plain);
    }

    #[test]
    fn a_token_revoked_meanwhile_is_a_401() {
        let e = crate::Error::Unauthorized("producer token pt-1 was revoked".into());
        let (code, message) = super::public(e);
        assert_eq!(code, axum::http::StatusCode::UNAUTHORIZED);
        assert_eq!(message, "producer token pt-1 was revoked");
    }
}
