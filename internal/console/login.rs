//! Logging in to the dashboard with the admin token, and out: a login is
//! a session of this process (see `auth`), counted against the guessing
//! throttle like a wrong bearer token.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::admit::{LoggedIn, MayLogIn};
use super::forms::ActionForm;
use super::html::page;
use super::views::{self, Viewer};
use super::{ClientAddr, Console, Guarded, auth};

#[derive(Deserialize)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

/// Only a path on this site, so the login form cannot redirect elsewhere:
/// it starts with one `/`, and holds no backslash and no control or
/// space character (browsers drop a tab or newline, which turns `/\t/evil`
/// into `//evil`, another site).
fn local(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            n.into()
        }
        _ => "/".into(),
    }
}

pub(super) async fn login_form(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<LoginQuery>,
) -> Response {
    if c.token.is_none() {
        let text = "This dashboard is read-only: no admin token is configured.";
        return page(
            StatusCode::FORBIDDEN,
            "Log in",
            &viewer,
            views::message(text),
        );
    }
    page(
        StatusCode::OK,
        "Log in",
        &viewer,
        views::login(&local(q.next.as_deref()), None),
    )
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
    next: Option<String>,
}

pub(super) async fn login(
    State(c): State<Console>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    _: MayLogIn,
    Form(f): Form<LoginForm>,
) -> Response {
    let next = local(f.next.as_deref());
    let check = || match &c.token {
        Some(t) if t.matches(f.token.trim()) => Ok(()),
        Some(_) => Err((StatusCode::UNAUTHORIZED, "That is not the admin token.")),
        None => Err((StatusCode::FORBIDDEN, "no admin token is configured")),
    };
    let refusal = match c.guarded(client.as_deref(), "login", check) {
        Ok(()) => None,
        Err(Guarded::Wait(d)) => Some((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too many wrong tokens from your address; try again in {} s.",
                d.as_secs().max(1)
            ),
        )),
        Err(Guarded::Refused((code, text))) => Some((code, text.to_string())),
    };
    match (&c.token, refusal) {
        (Some(_), None) => {
            tracing::info!("operator logged in to the dashboard");
            let mut r = Redirect::to(&next).into_response();
            let https = headers
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
            if let Ok(v) = auth::login_cookie(&c.sessions.start(), https).parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        (Some(_), Some((code, text))) => {
            let body = views::login(&next, Some(&text));
            page(code, "Log in", &c.viewer(&headers), body)
        }
        (None, _) => page(
            StatusCode::FORBIDDEN,
            "Log in",
            &Viewer::ReadOnly,
            views::message("no admin token is configured"),
        ),
    }
}

pub(super) async fn logout(
    State(c): State<Console>,
    headers: HeaderMap,
    _: LoggedIn,
    Form(f): Form<ActionForm>,
) -> Response {
    if let Err((code, text)) = auth::check_form(c.token.as_ref(), &c.sessions, &headers, &f.csrf) {
        return page(
            code,
            "Not allowed",
            &c.viewer(&headers),
            views::message(text),
        );
    }
    c.sessions.end(&headers);
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = auth::logout_cookie().parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_is_a_path_on_this_site() {
        for ok in ["/", "/partitions/a%2Fb?x=1"] {
            assert_eq!(super::local(Some(ok)), ok);
        }
        for bad in [
            "//evil",
            "/\t/evil",
            "/\n/x",
            "/\\evil",
            "https://evil",
            "/ /evil",
            "evil",
        ] {
            assert_eq!(super::local(Some(bad)), "/", "{bad:?}");
        }
    }
}
