//! The operator console: server-rendered dashboard pages under `/` and a
//! JSON API under `/api/v1`, both reading the database directly (no
//! processor state), so a dashboard can run beside a fleet or inside one
//! processor (`processor run --ui`).
//!
//! Reads are open; actions need the admin token (see `auth`); enqueueing
//! over the API (`enqueue`) takes it or the producer token. Every action
//! and API read starts with one preamble, `admit::Admitted`: the caller
//! let in, then the store. Everything shown from the database is escaped
//! by the templates and cut to a preview.
//!
//! The API: `api` (its routes), `reads`, `actions`, `completion`,
//! `enqueue`, `tokens`, `limits`; `stream` sends items as JSON lines
//! within a budget (exports here, and a processor's fan-in inputs). The
//! dashboard: `pages` (its routes and reads), `forms`, `login`, `html`
//! and `views` (the markup).

mod actions;
mod admit;
mod api;
mod auth;
mod bulk;
mod client;
mod completion;
pub mod endpoints;
mod enqueue;
mod enqueue_body;
mod errors;
mod forms;
mod html;
mod limits;
mod login;
mod matching;
mod pages;
mod reads;
mod schedules;
pub(crate) mod stream;
mod throttle;

pub(crate) use client::trusted;
pub(crate) use throttle::key as client_key;
mod tokens;
mod views;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::sync::OnceCell;

pub use admit::MAX_ACTION_BODY_BYTES;
pub use api::endpoints;
pub use auth::{AdminToken, ProducerToken};
pub use client::parse_proxy;
pub use enqueue::{MAX_ENQUEUE_BODY_BYTES, MAX_ENQUEUE_ITEMS};
pub use stream::EXPORT_BUDGET_BYTES;

use crate::{Error, Store};
use errors::public;
pub(crate) use errors::{answer, api_error, json_error, json_errors};

/// The address a request came from, for logs and throttles (the server
/// puts the peer's on each request; behind a `--trusted-proxy`, the
/// console replaces it by the client the proxy forwards for).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// What the console's handlers share.
#[derive(Clone)]
pub struct Console {
    /// Connected on first use inside a processor, whose listener starts
    /// before the database is reachable.
    store: Arc<OnceCell<Store>>,
    /// Where to connect on first use.
    database_url: Arc<str>,
    /// None = read-only.
    token: Option<AdminToken>,
    /// Allows enqueueing over the API only; None = only the admin token may.
    producer_token: Option<ProducerToken>,
    /// Failed token attempts, per client address and overall.
    throttle: Arc<throttle::Throttle>,
    /// Proxies whose `X-Forwarded-For` names the client (`--trusted-proxy`).
    trusted_proxies: Arc<[ipnet::IpNet]>,
    /// Host names answered besides IP addresses and `localhost`.
    allowed_hosts: Arc<[String]>,
    /// Logins to the pages.
    sessions: Arc<auth::Sessions>,
    /// Room for exported items, shared by all exports (see `stream`) and,
    /// inside a processor, its fan-in inputs.
    exports: Arc<tokio::sync::Semaphore>,
    /// Room for enqueue bodies, shared by all enqueues (see `enqueue_body`).
    enqueues: Arc<enqueue_body::Budget>,
    /// Inside a processor: its health, whose `schema` says when the
    /// database may be used (503 before).
    health: Option<Arc<crate::health::Health>>,
    /// Inside a processor: wakes its dispatch loop after an enqueue.
    wake: Option<Arc<tokio::sync::Notify>>,
}

impl Console {
    /// A console on an open store.
    pub fn new(store: Store, token: Option<AdminToken>) -> Self {
        Self {
            store: Arc::new(OnceCell::new_with(Some(store))),
            ..Self::lazy("", token)
        }
    }

    /// A console that connects to `database_url` on its first request.
    pub fn lazy(database_url: &str, token: Option<AdminToken>) -> Self {
        Self {
            database_url: Arc::from(database_url),
            store: Arc::new(OnceCell::new()),
            token,
            producer_token: None,
            throttle: Arc::default(),
            trusted_proxies: Arc::from([]),
            allowed_hosts: Arc::from([]),
            sessions: Arc::default(),
            exports: stream::export_budget(),
            enqueues: Arc::default(),
            health: None,
            wake: None,
        }
    }

    /// Remembers at most `clients` client addresses per kind of token in
    /// the guessing throttle (100,000 by default). A client past that is
    /// let through to the token check, its failures counted only by the
    /// throttle's backstop, so that a flood of addresses never locks out
    /// the right token.
    pub fn remembering(mut self, clients: usize) -> Self {
        self.throttle = Arc::new(throttle::Throttle::remembering(clients));
        self
    }

    /// Also allows enqueueing over the API (`POST
    /// /api/v1/partitions/{id}/items`) with this token, which allows
    /// nothing else, and only into partitions of no tenant, with no weight
    /// or in-flight cap; the admin token always may.
    pub fn with_producer_token(mut self, token: Option<ProducerToken>) -> Self {
        if token.is_some() {
            tracing::warn!(
                "--producer-token is deprecated: it may only enqueue into partitions of no \
                 tenant, without weight or max_in_flight; give each producer a scoped token \
                 of its own (processor tokens create --tenant T)"
            );
        }
        self.producer_token = token;
        self
    }

    /// Answers 503 to every request that needs the database until
    /// `health` says its schema is there (a processor migrating it).
    pub fn until_ready(mut self, health: Arc<crate::health::Health>) -> Self {
        self.health = Some(health);
        self
    }

    /// Wakes `wake` (a processor's dispatch loop) after each enqueue over
    /// the API, so that this processor picks the work up at once: on
    /// SQLite and MariaDB nothing else would before its next poll, and
    /// on PostgreSQL it saves the notification's round trip.
    pub fn waking(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Reads exports within `budget`, which the listener's other streams
    /// of items (a processor's fan-in inputs) share.
    pub(crate) fn sharing_exports(mut self, budget: Arc<tokio::sync::Semaphore>) -> Self {
        self.exports = budget;
        self
    }

    /// Also answers requests for these host names (`--allowed-host`); IP
    /// addresses and `localhost` are always answered.
    pub fn allowing(mut self, hosts: &[String]) -> Self {
        self.allowed_hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        self
    }

    /// Counts wrong tokens against the client a proxy in `proxies`
    /// forwards for (`X-Forwarded-For`) rather than against the proxy.
    pub fn trusting(mut self, proxies: &[ipnet::IpNet]) -> Self {
        self.trusted_proxies = proxies.into();
        self
    }

    /// Runs `check` (a comparison with the admin token) for a request
    /// `what` (`API`, `login`) from `client`, unless that client has used
    /// up its failed attempts (see `throttle`); a wrong token counts as one.
    fn guarded(
        &self,
        client: Option<&ClientAddr>,
        what: &str,
        check: impl FnOnce() -> Result<(), auth::Refusal>,
    ) -> Result<(), Guarded> {
        let (ip, kind) = (client_ip(client), throttle::Kind::Admin);
        self.throttle.admit(kind, ip).map_err(Guarded::Wait)?;
        check().map_err(|r| {
            if r.0 == StatusCode::UNAUTHORIZED {
                self.throttle.failed(kind, ip, what);
            }
            Guarded::Refused(r)
        })
    }

    async fn store(&self) -> crate::Result<&Store> {
        let starting = self
            .health
            .as_ref()
            .is_some_and(|h| !h.schema.load(std::sync::atomic::Ordering::Relaxed));
        if starting {
            return Err(Error::Unavailable(
                "the processor is starting: the database schema is not ready yet; try again shortly"
                    .into(),
            ));
        }
        self.store
            .get_or_try_init(|| Store::connect(&self.database_url, 4))
            .await
    }

    /// Tells the processor this console runs in that work was enqueued.
    fn enqueued(&self) {
        if let Some(wake) = &self.wake {
            wake.notify_one();
        }
    }

    /// Pages, assets and the JSON API, to merge into a listener's router.
    pub fn router(self) -> Router {
        Router::new()
            .merge(pages::routes())
            .nest("/api/v1", api::routes())
            .layer(axum::middleware::map_response(secure_headers))
            // Enqueue's route sets its own, larger cap.
            .layer(axum::extract::DefaultBodyLimit::max(MAX_ACTION_BODY_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                check_host,
            ))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                client::resolve,
            ))
            .with_state(self)
    }
}

/// The client's address; unspecified when the server did not say.
fn client_ip(client: Option<&ClientAddr>) -> IpAddr {
    client.map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

/// Why [`Console::guarded`] refused a request.
enum Guarded {
    /// Too many failed attempts: try again after this long (429).
    Wait(std::time::Duration),
    /// The token check's own refusal.
    Refused(auth::Refusal),
}

impl Guarded {
    /// As an API answer: JSON, with `Retry-After` when throttled.
    fn json(self) -> Response {
        match self {
            Guarded::Wait(d) => {
                let secs = d.as_secs().max(1);
                let message =
                    format!("too many wrong tokens from this address; try again in {secs} s");
                let mut r = api_error(StatusCode::TOO_MANY_REQUESTS, &message);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                r
            }
            Guarded::Refused((code, message)) => api_error(code, message),
        }
    }
}

/// Refuses a request whose `Host` names neither an IP address,
/// `localhost`, nor an allowed host: a page on an attacker's name that
/// resolves to this listener (DNS rebinding) cannot read or act.
async fn check_host(
    State(c): State<Console>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if host_allowed(host, &c.allowed_hosts) {
        return next.run(req).await;
    }
    let message = format!(
        "this console does not answer for host {:?}; start it with --allowed-host NAME to allow a name",
        crate::printable::printable(host)
    );
    api_error(StatusCode::MISDIRECTED_REQUEST, &message)
}

/// Whether `host` (a `Host` header: name or address, maybe with a port)
/// is an IP address, `localhost` or one of `allowed`.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok() || name == "localhost" || allowed.contains(&name)
}

/// No framing, no sniffing, no inline script: item data can never run.
async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts() {
        let allowed = ["feed.example".to_string()];
        for ok in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.0.0.7",
            "localhost:8080",
            "Feed.Example:443",
        ] {
            assert!(super::host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
        ] {
            assert!(!super::host_allowed(bad, &allowed), "{bad}");
        }
    }
}
