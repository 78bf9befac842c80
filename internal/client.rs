//! The HTTP clients Feed sends with: hyper's, for handler calls (the hot
//! path), and reqwest's, for completion events; the URL and fixed headers
//! of both, checked once at start, and error texts without credentials.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rustls_platform_verifier::BuilderVerifierExt;

use crate::{Error, Result};

/// The handler's HTTP client: hyper's pooled client over keep-alive
/// connections (TLS for https:// URLs). It is hyper directly, not reqwest:
/// the handler call is Feed's hot path, and reqwest's layers (redirects,
/// retries, URL re-parsing) cost a share of the processor's CPU per item.
pub(crate) type HandlerClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The handler's client: keep-alive connections (up to `idle` of them kept
/// idle), `TCP_NODELAY`, a connect timeout, TLS verified against the
/// platform's roots, and no redirect followed. A request is only sent
/// again on a fresh connection when the pooled one closed before any of
/// it was written: Feed retries with a stored attempt and a backoff.
pub(crate) fn handler_client(timeout: Duration, idle: usize) -> Result<HandlerClient> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| Error::Config(format!("cannot set up TLS for the handler client: {e}")))?
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(timeout.min(Duration::from_secs(10))));
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(idle)
        .build(connector))
}

/// An error with its causes, each once.
pub(crate) fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        src = s.source();
    }
    out
}

/// An http:// or https:// URL given by `flag`. The error does not repeat
/// the text, which may carry a password or a key.
pub(crate) fn endpoint(flag: &str, text: &str) -> Result<reqwest::Url> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        Error::Config(format!(
            "{flag} is not a URL ({e}); use e.g. http://127.0.0.1:9000/feed"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::Config(format!(
            "{flag} must be http:// or https://, not {}:",
            url.scheme()
        )));
    }
    Ok(url)
}

/// The headers of every request: `Content-Type` and the extra `headers`
/// (given by `flag`), marked sensitive so they never show in debug output.
pub(crate) fn fixed_headers(
    content_type: &str,
    headers: &[(String, String)],
    flag: &str,
) -> Result<HeaderMap> {
    let mut out = HeaderMap::new();
    let ct = HeaderValue::from_str(content_type)
        .map_err(|_| Error::Config("--content-type is not a valid header value".into()))?;
    out.insert(reqwest::header::CONTENT_TYPE, ct);
    for (name, value) in headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Error::Config(format!("{flag} name {name:?} is not a valid header name"))
        })?;
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            Error::Config(format!(
                "{flag} {name}: the value is not a valid header value"
            ))
        })?;
        v.set_sensitive(true);
        out.append(n, v);
    }
    Ok(out)
}

/// A client with `timeout` per request that follows no redirect and never
/// replays a POST by itself: Feed retries with a stored attempt and a
/// backoff (nor does it copy every request in case it might).
pub(crate) fn client(timeout: Duration, idle: usize) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .pool_max_idle_per_host(idle)
        .build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))
}

/// The error with its causes, without the URL (which may carry credentials).
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let out = causes(e);
    match e.url() {
        Some(u) => out.replace(&format!(" for url ({u})"), ""),
        None => out,
    }
}

pub(crate) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}
