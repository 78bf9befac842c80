//! The small HTTP listener: `/healthz`, `/readyz` and `/metrics`, plus the
//! console (dashboard and JSON API) with `--ui`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// What `/readyz` reports, kept current by the session and dispatch loops.
#[derive(Debug, Default)]
pub struct Health {
    /// The last statement reached the database.
    pub database: AtomicBool,
    /// The session is live (heartbeat within the expiry).
    pub session: AtomicBool,
    /// The last delivery reached the handler.
    pub handler: AtomicBool,
}

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

/// [`router`], plus the console when `config.ui` is set.
pub fn app(health: Arc<Health>, registry: Arc<Registry>, config: &crate::Config) -> Router {
    let app = router(health, registry);
    if !config.ui {
        return app;
    }
    let console = crate::console::Console::lazy(&config.database_url, config.admin_token.clone());
    app.merge(console.router())
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let db = s.health.database.load(Ordering::Relaxed);
    let session = s.health.session.load(Ordering::Relaxed);
    let handler = s.health.handler.load(Ordering::Relaxed);
    let body = serde_json::json!({"database": db, "session": session, "handler": handler});
    let code = if db && session && handler {
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
