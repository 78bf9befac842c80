//! A fan-in handler's inputs. Every delivery of an item at a gate above 0
//! carries `Feed-Inputs: <url>` (a batch: `"inputs"` per item), a URL on
//! this processor's listener that serves the partition's items at the
//! gates below as JSON lines, in write order, in pages streamed within
//! the listener's budget of bytes (the machinery of `items.ndjson`). So a
//! ranking step reads every classification made before it without any
//! state of its own, whichever replica of the handler it runs on.
//!
//! The URL is a capability (see `token`): it opens that partition's
//! inputs at that gate, for `--request-timeout` plus `--session-expiry`,
//! and needs no other token.

mod token;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use tokio::sync::Semaphore;

use token::Key;

pub use crate::config::InputsUrl;
pub use token::Refused;

use crate::console::{api_error, json_error};
use crate::{Config, Store};

/// Inputs a page holds when the reader gives no `limit`.
pub const DEFAULT_LIMIT: usize = 10_000;

/// The largest `limit` a reader may give.
pub const MAX_LIMIT: usize = 100_000;

/// The listener's path of a partition's inputs, under the base URL.
pub const PATH: &str = "/inputs/{partition}";

/// What a path segment or a query value leaves as it is: RFC 3986's
/// unreserved characters.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encoded(text: &str) -> impl std::fmt::Display + '_ {
    utf8_percent_encode(text, ENCODED)
}

/// The inputs of this processor's deliveries: the key their URLs are
/// signed with, where handlers reach them, and the route that serves them.
#[derive(Debug)]
pub struct Inputs {
    key: Key,
    /// The base URL, without a trailing `/`.
    base: String,
    /// How long a URL stays valid.
    ttl: Duration,
    /// Set once the processor has opened the database.
    store: OnceLock<Store>,
    /// Room for the items being sent, shared with the console's exports.
    budget: Arc<Semaphore>,
}

impl Inputs {
    /// The inputs of a processor whose listener is bound at `local`;
    /// None when `--inputs-url off`.
    pub(crate) fn new(config: &Config, local: SocketAddr) -> Option<Arc<Inputs>> {
        let base = match &config.listen.inputs_url {
            InputsUrl::Off => return None,
            InputsUrl::Base(base) => base.clone(),
            InputsUrl::Derived => derived(local),
        };
        let ttl = config
            .listen
            .inputs_ttl
            .unwrap_or(config.handler.request_timeout + config.leases.session_expiry);
        tracing::info!(base = %base, ttl = ?ttl, "fan-in inputs: items at gates above 0 carry Feed-Inputs");
        Some(Arc::new(Inputs {
            key: Key::random(),
            base,
            ttl,
            store: OnceLock::new(),
            budget: crate::console::stream::export_budget(),
        }))
    }

    /// Serves from `store` from now on (503 before).
    pub(crate) fn connect(&self, store: Store) {
        let _ = self.store.set(store);
    }

    /// The budget its streams read within, to share with the console's.
    pub(crate) fn budget(&self) -> Arc<Semaphore> {
        self.budget.clone()
    }

    /// The `Feed-Inputs` URL of an item of `partition` at `gate`, valid
    /// from now for the TTL; None at gate 0, which has no inputs.
    pub fn url(&self, partition: &str, gate: i64) -> Option<String> {
        if gate <= 0 {
            return None;
        }
        let ttl = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        let expires = now_ms().saturating_add(ttl);
        Some(self.url_at(partition, gate, expires))
    }

    fn url_at(&self, partition: &str, gate: i64, expires: i64) -> String {
        let token = self.key.token(partition, gate, expires);
        format!(
            "{}/inputs/{}?gate={gate}&expires={expires}&token={token}",
            self.base,
            encoded(partition)
        )
    }

    /// The route, to merge into the listener's router.
    pub(crate) fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route(PATH, axum::routing::get(serve))
            .with_state(self)
    }
}

/// The base URL of a listener bound at `local`, as a handler on this
/// host reaches it.
fn derived(local: SocketAddr) -> String {
    let ip = match local.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, local.port()))
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The query of an inputs URL: the grant (`gate`, `expires`, `token`),
/// then the reader's page (`after`, `limit`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputsQuery {
    gate: Option<i64>,
    expires: Option<i64>,
    token: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// `GET /inputs/{partition}`: the partition's items below the gate, as
/// JSON lines, from `after`, at most `limit`; `Link: <…>; rel="next"`
/// when more follow.
async fn serve(
    State(inputs): State<Arc<Inputs>>,
    Path(partition): Path<String>,
    query: Result<Query<InputsQuery>, QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(rejection) => return api_error(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    let (Some(gate), Some(expires), Some(token)) = (q.gate, q.expires, q.token.as_deref()) else {
        let message =
            "an inputs URL carries gate, expires and token: use the Feed-Inputs URL as it came";
        return api_error(StatusCode::UNAUTHORIZED, message);
    };
    if let Err(refused) = inputs.key.check(&partition, gate, expires, token, now_ms()) {
        static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
        if let Some(refusals) = LOG.due() {
            tracing::warn!(partition = %partition, gate, refusals, error = %refused, "an inputs URL was refused");
        }
        let code = match refused {
            Refused::Expired { .. } => StatusCode::UNAUTHORIZED,
            Refused::Forged { .. } => StatusCode::FORBIDDEN,
        };
        return api_error(code, &refused.to_string());
    }
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        let message = format!("limit {limit} is out of range: 1 to {MAX_LIMIT}");
        return api_error(StatusCode::BAD_REQUEST, &message);
    }
    let Some(store) = inputs.store.get() else {
        let message = "the processor is starting: try again shortly";
        return api_error(StatusCode::SERVICE_UNAVAILABLE, message);
    };
    let started = async {
        let mut export = store.inputs(&partition, gate)?;
        if let Some(after) = &q.after {
            export.after_item(after).await?;
        }
        let next = export.limit(limit).await?;
        let first = export.plan().await?;
        Ok::<_, crate::Error>((export, next, first))
    };
    let (export, next, first) = match started.await {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    let lines = crate::console::stream::lines(
        export,
        first,
        inputs.budget.clone(),
        crate::lines::input_line,
    );
    let mut r = ([(header::CONTENT_TYPE, "application/x-ndjson")], lines).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(last) = next {
        let url = format!(
            "{}&after={}&limit={limit}",
            inputs.url_at(&partition, gate, expires),
            encoded(&last)
        );
        if let Ok(v) = HeaderValue::from_str(&format!("<{url}>; rel=\"next\"")) {
            h.insert(header::LINK, v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_the_listeners_address_as_a_handler_here_reaches_it() {
        let at = |s: &str| derived(s.parse().unwrap());
        assert_eq!(at("0.0.0.0:8080"), "http://127.0.0.1:8080");
        assert_eq!(at("[::]:8080"), "http://[::1]:8080");
        assert_eq!(at("10.0.0.7:9000"), "http://10.0.0.7:9000");
        assert_eq!(at("[fd00::7]:9000"), "http://[fd00::7]:9000");
    }

    #[test]
    fn inputs_url_takes_off_or_a_base_url() {
        assert_eq!(InputsUrl::parse("off").unwrap(), InputsUrl::Off);
        assert_eq!(
            InputsUrl::parse("https://proxy.example/feed-1/").unwrap(),
            InputsUrl::Base("https://proxy.example/feed-1".into())
        );
        for bad in [
            "",
            "feed-1:8080",
            "ftp://x/",
            "http://x/?a=1",
            "http://x/#f",
        ] {
            let e = InputsUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--inputs-url"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_url_names_its_partition_encoded_and_opens_it() {
        let mut config = Config::new("sqlite::memory:", "http://127.0.0.1:9/");
        config.listen.inputs_url = InputsUrl::Base("http://feed-1:8080".into());
        let inputs = Inputs::new(&config, "127.0.0.1:1".parse().unwrap()).unwrap();
        assert_eq!(inputs.url("p", 0), None);
        let url = inputs.url("a b/ü", 3).unwrap();
        let rest = url.strip_prefix("http://feed-1:8080/inputs/a%20b%2F%C3%BC?gate=3&expires=");
        let (expires, token) = rest.unwrap().split_once("&token=").unwrap();
        let expires: i64 = expires.parse().unwrap();
        // --request-timeout plus --session-expiry, 40 s by default.
        let left = expires - now_ms();
        assert!((39_000..=40_000).contains(&left), "{left}");
        assert_eq!(
            inputs.key.check("a b/ü", 3, expires, token, now_ms()),
            Ok(())
        );
    }
}
