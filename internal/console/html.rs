//! The dashboard's answers: a page drawn for its viewer, or the error
//! page. Pages, forms, the login and the admission checks all answer
//! through these, so every page has one frame and one error form.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::Markup;

use super::public;
use super::views::{self, Viewer};

/// A page with `body` in the frame drawn for `viewer`.
pub(super) fn page(code: StatusCode, title: &str, viewer: &Viewer, body: Markup) -> Response {
    (code, Html(views::layout(title, viewer, body).into_string())).into_response()
}

/// The error page for a library error (database details logged, not shown).
pub(super) fn failure(e: crate::Error, viewer: &Viewer) -> Response {
    let (code, text) = public(e);
    page(code, "Error", viewer, views::message(&text))
}

/// The page, or the error page when it could not be made.
pub(super) fn respond(viewer: &Viewer, title: &str, body: crate::Result<Markup>) -> Response {
    match body {
        Ok(m) => page(StatusCode::OK, title, viewer, m),
        Err(e) => failure(e, viewer),
    }
}

/// Wraps a whole page body in `#live` so the script refreshes it.
pub(super) fn html_live(m: Markup) -> Markup {
    maud::html! { div #live { (m) } }
}
