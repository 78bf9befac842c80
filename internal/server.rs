//! The small HTTP listener: `/healthz`, `/readyz` and `/metrics`, the
//! fan-in inputs of this processor's deliveries (`/inputs/{partition}`,
//! see `inputs`), plus the console (dashboard and JSON API) with `--ui`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::console::ClientAddr;
pub use crate::health::{Health, Hold};
use crate::inputs::Inputs;
use crate::write_idle::WriteIdle;

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    registry: Arc<Registry>,
}

/// The router, separate from binding so tests can serve it anywhere.
pub fn router(health: Arc<Health>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AppState { health, registry })
}

/// [`router`], plus the route of fan-in `inputs` when there are any, and
/// the console when `config.listen.ui` is set (its exports share the
/// inputs' budget); an enqueue through it wakes `wake` (the processor's
/// dispatch loop).
pub fn app(
    health: Arc<Health>,
    registry: Arc<Registry>,
    config: &crate::Config,
    wake: Arc<tokio::sync::Notify>,
    inputs: &Option<Arc<Inputs>>,
) -> Router {
    let mut app = router(health.clone(), registry);
    if let Some(inputs) = inputs {
        app = app.merge(inputs.clone().router());
    }
    if !config.listen.ui {
        return app;
    }
    let mut console =
        crate::console::Console::lazy(&config.database.url, config.listen.admin_token.clone())
            .until_ready(health.clone())
            .waking(wake)
            .with_producer_token(config.listen.producer_token.clone())
            .allowing(&config.listen.allowed_hosts)
            .trusting(&config.listen.trusted_proxies);
    if let Some(inputs) = inputs {
        console = console.sharing_exports(inputs.budget());
    }
    app.merge(console.router())
}

/// Binds `--listen`; a failure says what to do. `off` says whether
/// `--listen off` is there to run without a listener.
pub async fn bind(addr: &str, off: bool) -> crate::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|error| {
        let hint = match (error.kind(), off) {
            (std::io::ErrorKind::AddrInUse, true) => {
                "; another process listens there: give --listen a free address (e.g. 127.0.0.1:8081), or --listen off to run without the health listener"
            }
            (std::io::ErrorKind::AddrInUse, false) => {
                "; another process listens there: give --listen a free address (e.g. 127.0.0.1:8081)"
            }
            _ => "; give --listen an address of this host, e.g. 127.0.0.1:8080",
        };
        crate::Error::Listen {
            addr: addr.to_string(),
            error,
            hint,
        }
    })
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let db = s.health.database.load(Ordering::Relaxed);
    let schema = s.health.schema.load(Ordering::Relaxed);
    let session = s.health.session.load(Ordering::Relaxed);
    let handler = s.health.handler.load(Ordering::Relaxed);
    let open = s.health.breaker_open.load(Ordering::Relaxed);
    let breaker = if open { "open" } else { "closed" };
    let held = s.health.hold().map(|h| h.reason);
    let releasing = s.health.releasing.load(Ordering::Relaxed);
    let primary = !s.health.not_primary.load(Ordering::Relaxed);
    let polling = s.health.polling().map(|h| h.reason);
    let body = serde_json::json!({"database": db, "primary": primary, "schema": schema, "session": session, "handler": handler, "breaker": breaker, "held": held, "releasing": releasing, "polling": polling});
    let code = if db && schema && session && handler && !open && polling.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(body))
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &s.registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, String::new()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// Connections served at once; more wait in the kernel's backlog. The
/// open-file limit is raised at start so that this many fit beside the
/// database and handler connections.
const MAX_CONNECTIONS: usize = 4_096;

/// A client must send a request's headers within this time, counted from
/// the connection's start or the end of the previous request: a socket
/// that sends nothing, or headers byte by byte, is closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// A request (its body included) must be handled within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Once answering, a write to a client that reads nothing for this long
/// closes its connection, and frees what its answer held (an export).
pub const WRITE_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// [`serve_trusting`] with no trusted proxy.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_trusting(listener, app, stop, &[]).await
}

/// Serves `app` on `listener` until `stop` resolves, then lets requests
/// in progress finish (up to [`REQUEST_TIMEOUT`]). Unlike a bare
/// `axum::serve`, idle and slow sockets are closed ([`HEADER_TIMEOUT`]),
/// every request is bounded in time, a client that stops reading an
/// answer is dropped ([`WRITE_IDLE_TIMEOUT`]), open connections are
/// capped, in all and per client (but for `proxies`, which carry many),
/// and each request carries its [`ClientAddr`].
pub async fn serve_trusting(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    proxies: &[ipnet::IpNet],
) -> std::io::Result<()> {
    raise_open_files();
    let conns = crate::conns::Conns::trusting(proxies);
    let app = bounded(app, REQUEST_TIMEOUT);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the connection slots are never closed"),
            () = &mut stop => break,
        };
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was accepted: wait a little, never spin.
                    tracing::warn!(error = %e, "accepting a connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Some(counted) = conns.admit(addr.ip()) else {
            static LOG: crate::ratelog::Every = crate::ratelog::Every::new();
            if let Some(refused) = LOG.due() {
                tracing::warn!(
                    client = %addr.ip(),
                    refused,
                    per_client = crate::conns::PER_CLIENT,
                    "a client holds the most connections one client may; its new ones are closed"
                );
            }
            continue;
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: axum::extract::Request<_>| {
            req.extensions_mut().insert(ClientAddr(addr));
            app.clone().oneshot(req)
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(
                hyper_util::rt::TokioIo::new(WriteIdle::new(stream, WRITE_IDLE_TIMEOUT, addr)),
                service,
            );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
            drop(counted);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, graceful.shutdown()).await;
    Ok(())
}

/// `app` with every request cut off after `limit`, answered 408 in the
/// API's JSON error shape.
fn bounded(app: Router, limit: Duration) -> Router {
    app.layer(tower_http::timeout::TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        limit,
    ))
    .layer(axum::middleware::map_response(move |r| timed_out(r, limit)))
}

/// The timeout's empty 408 as a JSON error that says what happened.
async fn timed_out(r: axum::response::Response, limit: Duration) -> axum::response::Response {
    if r.status() != StatusCode::REQUEST_TIMEOUT || r.headers().contains_key(header::CONTENT_TYPE) {
        return r;
    }
    let message = format!(
        "the request was not handled within {} s and was stopped; an enqueue stopped so is \
         rolled back (nothing of it is written): send it again",
        limit.as_secs_f64()
    );
    crate::console::api_error(StatusCode::REQUEST_TIMEOUT, &message)
}

/// Raises this process's soft limit of open files to its hard limit, so
/// that many sockets (idle console clients, handler connections) cannot
/// starve the database of file descriptors; logs when it cannot.
fn raise_open_files() {
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, "could not raise the open-file limit");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_timeout_answers_the_api_error_shape() {
        let app = Router::new().route("/slow", get(std::future::pending::<&'static str>));
        let request = axum::http::Request::get("/slow")
            .body(axum::body::Body::empty())
            .unwrap();
        let r = bounded(app, Duration::from_millis(20))
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::REQUEST_TIMEOUT);
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("within 0.02 s"), "{message}");
    }
}
