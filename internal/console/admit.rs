//! Who may make a request, decided from its head alone, before any of its
//! body is read, and the one preamble every action and API read takes:
//! [`Admitted`], the caller let in and then the store. A handler takes it
//! before its body (axum runs extractors in order), so a client without
//! the token or a login cannot make the console buffer anything, and no
//! handler can skip the check or answer a missing database its own way;
//! what a client with one may send is capped at [`MAX_ACTION_BODY_BYTES`].

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::Response;

use super::html::{failure, page};
use super::views::{self, Viewer};
use super::{ClientAddr, Console, api_error, auth, client_ip, json_error, throttle};
use crate::Store;

/// The largest body an action, a limit change, an event retry or a page
/// form (the login included) may have: 8 KiB, many times what any of them
/// needs. A larger one answers 413 without being read. Enqueueing has its
/// own cap.
pub const MAX_ACTION_BODY_BYTES: usize = 8 << 10;

/// What a body over the cap answers.
const TOO_LARGE: &str = "the body is over the limit of 8 KiB for actions and forms";

/// A caller let in by `W`, and the store it reads or acts on.
pub(super) struct Admitted<W> {
    pub(super) store: Store,
    /// What the check learnt of the caller (a producer token's scope).
    pub(super) who: W,
}

/// A check that lets a caller in. Its caller is told in its own form
/// when the store cannot be had: JSON unless it says otherwise.
pub(super) trait Caller: FromRequestParts<Console, Rejection = Response> {
    fn unavailable(e: crate::Error, _parts: &Parts, _c: &Console) -> Response {
        json_error(e)
    }
}

impl<W: Caller + Send> FromRequestParts<Console> for Admitted<W> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        let who = W::from_request_parts(parts, c).await?;
        match c.store().await {
            Ok(store) => Ok(Admitted {
                store: store.clone(),
                who,
            }),
            Err(e) => Err(W::unavailable(e, parts, c)),
        }
    }
}

/// Whether the request declares a body over the cap (`Content-Length`); a
/// body sent without a length is cut at the cap as it is read.
fn declared_too_large(parts: &Parts) -> bool {
    parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > MAX_ACTION_BODY_BYTES as u64)
}

/// An API read: anyone may make it.
pub(super) struct Open;

impl FromRequestParts<Console> for Open {
    type Rejection = Response;

    async fn from_request_parts(_: &mut Parts, _: &Console) -> Result<Self, Response> {
        Ok(Open)
    }
}

impl Caller for Open {}

/// An API request with the admin token (`Authorization: Bearer`), unless
/// its client has guessed too much (see `throttle`).
pub(super) struct Bearer;

impl FromRequestParts<Console> for Bearer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        let client = parts.extensions.get::<ClientAddr>();
        let bearer = || auth::check_bearer(c.token.as_ref(), &parts.headers);
        c.guarded(client, "API", bearer).map_err(|g| g.json())?;
        Ok(Bearer)
    }
}

impl Caller for Bearer {}

/// An API request with the admin token, and a body within the cap.
pub(super) struct Admin;

impl FromRequestParts<Console> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        Bearer::from_request_parts(parts, c).await?;
        if declared_too_large(parts) {
            return Err(api_error(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE));
        }
        Ok(Admin)
    }
}

impl Caller for Admin {}

/// A page's answer to a form over the cap.
fn too_large_page(viewer: &Viewer) -> Response {
    let body = views::message(TOO_LARGE);
    page(StatusCode::PAYLOAD_TOO_LARGE, "Error", viewer, body)
}

/// A page form from a browser with a live login, within the cap; its CSRF
/// token is checked once the form is read.
pub(super) struct LoggedIn;

impl FromRequestParts<Console> for LoggedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        let viewer = c.viewer(&parts.headers);
        if let Viewer::Admin(_) = viewer {
            if declared_too_large(parts) {
                return Err(too_large_page(&viewer));
            }
            return Ok(LoggedIn);
        }
        let refused = auth::check_form(c.token.as_ref(), &c.sessions, &parts.headers, "").err();
        let (code, text) = refused.unwrap_or((
            StatusCode::UNAUTHORIZED,
            "log in with the admin token first",
        ));
        Err(page(code, "Not allowed", &viewer, views::message(text)))
    }
}

impl Caller for LoggedIn {
    fn unavailable(e: crate::Error, parts: &Parts, c: &Console) -> Response {
        failure(e, &c.viewer(&parts.headers))
    }
}

/// A login attempt from a client that has not used up its allowance of
/// wrong tokens, within the cap.
pub(super) struct MayLogIn;

impl FromRequestParts<Console> for MayLogIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        let ip = client_ip(parts.extensions.get::<ClientAddr>());
        let viewer = c.viewer(&parts.headers);
        let Err(wait) = c.throttle.admit(throttle::Kind::Admin, ip) else {
            if declared_too_large(parts) {
                return Err(too_large_page(&viewer));
            }
            return Ok(MayLogIn);
        };
        let text = format!(
            "Too many wrong tokens from your address; try again in {} s.",
            wait.as_secs().max(1)
        );
        Err(page(
            StatusCode::TOO_MANY_REQUESTS,
            "Log in",
            &viewer,
            views::login("/", Some(&text)),
        ))
    }
}
