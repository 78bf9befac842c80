//! Producer tokens on the API: who an enqueue comes from (the admin
//! token, unscoped; a producer token of `feed_producer_tokens`, bound to
//! its scope; the legacy `--producer-token`, bound to the narrowest
//! scope), and the admin's
//! `GET`/`POST /api/v1/producer-tokens` and `DELETE
//! /api/v1/producer-tokens/{id}`.

use axum::extract::{FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admit::{Admitted, Bearer, Caller};
use super::{ClientAddr, Console, Guarded, api_error, auth, json_error};
use crate::store::ProducerScope;

/// Who sends an enqueue.
enum Producer {
    /// The admin token: any partition.
    Unscoped,
    /// A producer token, or the legacy `--producer-token`: its scope only.
    Scoped(ProducerScope),
    /// Neither: why not.
    Refused(auth::Refusal),
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

const NO_TOKEN: auth::Refusal = (
    StatusCode::UNAUTHORIZED,
    "a valid producer or admin token is required: Authorization: Bearer <token>",
);

const DISABLED: auth::Refusal = (
    StatusCode::FORBIDDEN,
    "enqueueing over the API is disabled: create a producer token (processor tokens create \
     --tenant T) or start the dashboard with --producer-token or --producer-token-file (or \
     --admin-token / --admin-token-file)",
);

/// Who the request's token belongs to: the configured tokens are compared
/// first (in constant time), then a producer token is looked up by its
/// hash. A wrong token is a 401 (which the throttle counts); 403 only when
/// no token of any kind exists, so there is nothing to guess.
async fn producer(c: &Console, headers: &HeaderMap) -> crate::Result<Producer> {
    let configured = auth::check_producer(c.token.as_ref(), c.producer_token.as_ref(), headers);
    let Err(refusal) = configured else {
        let admin = bearer(headers).is_some_and(|g| c.token.as_ref().is_some_and(|t| t.matches(g)));
        return Ok(if admin {
            Producer::Unscoped
        } else {
            Producer::Scoped(ProducerScope::legacy())
        });
    };
    let store = c.store().await?;
    if let Some(given) = bearer(headers)
        && let Some(scope) = store.producer_scope(given).await?
    {
        return Ok(Producer::Scoped(scope));
    }
    if refusal.0 != StatusCode::FORBIDDEN {
        return Ok(Producer::Refused(refusal));
    }
    Ok(Producer::Refused(if store.has_producer_tokens().await? {
        NO_TOKEN
    } else {
        DISABLED
    }))
}

/// An enqueue's caller, let in by its token: None for the admin token
/// (any partition), else the scope of a producer token (or of the legacy
/// `--producer-token`), which bounds what it may enqueue.
pub(super) struct Producing(pub(super) Option<ProducerScope>);

impl FromRequestParts<Console> for Producing {
    type Rejection = Response;

    /// The token first: nothing of the body is read for a refused request,
    /// and nothing is looked up for an address that has guessed too much.
    /// The admin token, and a wrong token (which may be a guess at it),
    /// also need the client's admin allowance, so that this route gives
    /// no second allowance for guessing the admin token.
    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        use super::throttle::Kind;
        let ip = super::client_ip(parts.extensions.get::<ClientAddr>());
        let admit = |kind| c.throttle.admit(kind, ip).map_err(Guarded::Wait);
        admit(Kind::Producer).map_err(Guarded::json)?;
        match producer(c, &parts.headers).await.map_err(json_error)? {
            Producer::Scoped(scope) => Ok(Producing(Some(scope))),
            Producer::Unscoped => admit(Kind::Admin)
                .map(|()| Producing(None))
                .map_err(Guarded::json),
            Producer::Refused(r) if r.0 == StatusCode::UNAUTHORIZED => {
                admit(Kind::Admin).map_err(Guarded::json)?;
                c.throttle.failed(Kind::Producer, ip, "enqueue");
                c.throttle.failed(Kind::Admin, ip, "enqueue");
                Err(Guarded::Refused(r).json())
            }
            Producer::Refused(r) => Err(Guarded::Refused(r).json()),
        }
    }
}

impl Caller for Producing {}

/// `POST /producer-tokens`: what the new token may do.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct New {
    tenant: String,
    prefix: Option<String>,
    max_weight: Option<u32>,
    max_in_flight: Option<u32>,
}

/// The answer to a created token: its scope and, this once, the token.
#[derive(serde::Serialize)]
struct Created {
    #[serde(flatten)]
    scope: ProducerScope,
    token: String,
}

/// The largest body of `POST /producer-tokens`.
const MAX_BODY: usize = 4 << 10;

pub(super) async fn list(admin: Admitted<Bearer>) -> Response {
    match admin.store.producer_tokens().await {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => json_error(e),
    }
}

pub(super) async fn create(admin: Admitted<Bearer>, request: Request) -> Response {
    let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_BODY).await else {
        return api_error(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 4 KiB");
    };
    let new: New = match serde_json::from_slice(&body) {
        Ok(n) => n,
        Err(e) => {
            let message = format!(
                "the body must be {{\"tenant\": T, \"prefix\"?: P, \"max_weight\"?: N, \
                 \"max_in_flight\"?: N}}: {e}"
            );
            return api_error(StatusCode::BAD_REQUEST, &message);
        }
    };
    let mut scope = match ProducerScope::new(new.tenant) {
        Ok(s) => s,
        Err(e) => return json_error(e),
    };
    scope.prefix = new.prefix;
    scope.max_weight = new.max_weight;
    scope.max_in_flight = new.max_in_flight;
    match admin.store.create_producer_token(&scope).await {
        Ok((scope, token)) => {
            tracing::info!(token = %scope.id, tenant = %scope.tenant, "producer token created over the API");
            axum::Json(Created { scope, token }).into_response()
        }
        Err(e) => json_error(e),
    }
}

pub(super) async fn revoke(Path(id): Path<String>, admin: Admitted<Bearer>) -> Response {
    match admin.store.revoke_producer_token(&id).await {
        Ok(true) => {
            tracing::info!(token = %id, "producer token revoked over the API");
            axum::Json(serde_json::json!({"id": id, "revoked": true})).into_response()
        }
        Ok(false) => api_error(StatusCode::NOT_FOUND, "no producer token has this id"),
        Err(e) => json_error(e),
    }
}
