//! The dashboard's routes: pages, login, form actions and embedded assets.
//! Every action is a POST form that first renders a confirmation page (so
//! confirming needs no script), then acts with the same code as the API
//! (tenants' limits: the same code as `PUT`/`DELETE /api/v1/limits`).

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use maud::Markup;
use serde::Deserialize;

use super::ClientAddr;
use super::admit::{LoggedIn, MayLogIn};
use super::api::Action;
use super::views::{self, Viewer, enc};
use super::{Console, Guarded, auth, limits, public};
use crate::store::listing::{ItemFilter, PartitionFilter};

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/console.js");
/// Failed items listed first on a partition's page.
const FAILED_FIRST: u64 = 20;
/// Rows per page.
const PAGE: u64 = 50;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/", get(overview))
        .route("/partitions", get(partitions))
        .route("/partitions/{id}", get(partition))
        .route("/partitions/{id}/{action}", post(partition_action))
        .route("/items/{id}/retry", post(item_retry))
        .route("/processors", get(processors))
        .route("/limits", get(limits_page).post(limits_set))
        .route("/limits/{tenant}/clear", post(limits_clear))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/assets/style.css", get(|| asset("text/css", STYLE)))
        .route(
            "/assets/console.js",
            get(|| asset("text/javascript", SCRIPT)),
        )
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

impl Console {
    pub(super) fn viewer(&self, headers: &HeaderMap) -> Viewer {
        match &self.token {
            None => Viewer::ReadOnly,
            Some(_) => match self.sessions.csrf(headers) {
                Some(csrf) => Viewer::Admin(csrf),
                None => Viewer::LoggedOut,
            },
        }
    }
}

/// Who is looking (from the session cookie): every page is drawn for one.
impl FromRequestParts<Console> for Viewer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Self::Rejection> {
        Ok(c.viewer(&parts.headers))
    }
}

pub(super) fn page(code: StatusCode, title: &str, viewer: &Viewer, body: Markup) -> Response {
    (code, Html(views::layout(title, viewer, body).into_string())).into_response()
}

fn failure(e: crate::Error, viewer: &Viewer) -> Response {
    let (code, text) = public(e);
    page(code, "Error", viewer, views::message(&text))
}

async fn overview(State(c): State<Console>, viewer: Viewer) -> Response {
    let r = async { c.store().await?.overview().await }.await;
    let body = r.map(|o| html_live(views::overview(&o)));
    respond(&viewer, "Overview", body)
}

/// The page, or the error page when it could not be made.
fn respond(viewer: &Viewer, title: &str, body: crate::Result<Markup>) -> Response {
    match body {
        Ok(m) => page(StatusCode::OK, title, viewer, m),
        Err(e) => failure(e, viewer),
    }
}

/// Wraps a whole page body in `#live` so the script refreshes it.
fn html_live(m: Markup) -> Markup {
    maud::html! { div #live { (m) } }
}

#[derive(Deserialize, Default)]
struct ListQuery {
    status: Option<String>,
    prefix: Option<String>,
    after: Option<String>,
    done: Option<String>,
}

async fn partitions(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let f = PartitionFilter {
        status: q.status.clone().filter(|s| !s.is_empty()),
        prefix: q.prefix.clone(),
        after: q.after.filter(|s| !s.is_empty()),
        limit: PAGE,
    };
    let r = async { c.store().await?.partitions(&f).await }.await;
    let (status, prefix) = (q.status.unwrap_or_default(), q.prefix.unwrap_or_default());
    let body = r.map(|p| views::partitions(&p, &status, &prefix));
    respond(&viewer, "Partitions", body)
}

async fn partition(
    State(c): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    let r = async {
        let s = c.store().await?;
        let p = s.partition(&id).await?;
        let failed = ItemFilter {
            status: Some("failed".into()),
            limit: FAILED_FIRST,
            ..Default::default()
        };
        let failed = s.items(&id, &failed).await?.data;
        let retrying = s
            .retrying_items(std::slice::from_ref(&p.id), FAILED_FIRST as usize)
            .await?;
        let processors = s.processors().await?;
        let held: Vec<_> = processors
            .into_iter()
            .filter(|s| p.owner.as_deref() == Some(s.id.as_str()))
            .collect();
        let all = ItemFilter {
            status: q.status.clone().filter(|s| !s.is_empty()),
            after: q.after.clone().filter(|s| !s.is_empty()),
            limit: PAGE,
            ..Default::default()
        };
        let items = s.items(&id, &all).await?;
        Ok::<_, crate::Error>(views::partition(
            &p,
            &viewer,
            views::Lists {
                failed: &failed,
                retrying: &retrying,
                items: &items,
                owner: &held,
            },
            done_message(q.done.as_deref()),
        ))
    }
    .await;
    respond(&viewer, &format!("Partition {id}"), r)
}

async fn processors(State(c): State<Console>, viewer: Viewer) -> Response {
    let r = async { c.store().await?.processors().await }.await;
    let body = r.map(|list| html_live(views::processors(&list)));
    respond(&viewer, "Processors", body)
}

#[derive(Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    confirm: Option<String>,
    gate: Option<i64>,
}

/// An action's confirmation question and where it goes.
struct Ask {
    /// The form's action path.
    path: String,
    /// What the confirmation page asks.
    question: String,
    /// The page to return to.
    back: String,
    /// Which note the page shows afterwards (see [`done_message`]).
    done: &'static str,
    /// The form's fields the confirmation sends again (besides `csrf`).
    fields: Vec<(&'static str, String)>,
}

/// What every action form sends: its CSRF token, and `confirm=yes` once confirmed.
struct Sent<'a> {
    csrf: &'a str,
    confirmed: bool,
}

impl ActionForm {
    fn sent(&self) -> Sent<'_> {
        Sent {
            csrf: &self.csrf,
            confirmed: self.confirm.as_deref() == Some("yes"),
        }
    }
}

/// Checks the form, asks for confirmation, then acts and goes back to the page.
async fn act(
    c: &Console,
    headers: &HeaderMap,
    form: Sent<'_>,
    ask: Ask,
    run: impl AsyncFnOnce(&crate::Store) -> crate::Result<()>,
) -> Response {
    let viewer = c.viewer(headers);
    if let Err((code, text)) = auth::check_form(c.token.as_ref(), &c.sessions, headers, form.csrf) {
        return page(code, "Not allowed", &viewer, views::message(text));
    }
    if !form.confirmed {
        let body = views::confirm(&ask.question, &ask.path, form.csrf, &ask.fields, &ask.back);
        return page(StatusCode::OK, "Confirm", &viewer, body);
    }
    let result = async { run(c.store().await?).await }.await;
    match result {
        Ok(()) => Redirect::to(&format!("{}?done={}", ask.back, ask.done)).into_response(),
        Err(e) => failure(e, &viewer),
    }
}

async fn partition_action(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
    _: LoggedIn,
    Form(form): Form<ActionForm>,
) -> Response {
    let viewer = c.viewer(&headers);
    let Some(action) = Action::parse(&name, form.gate) else {
        let text = "unknown action, or checkpoint without a gate";
        return page(
            StatusCode::BAD_REQUEST,
            "Error",
            &viewer,
            views::message(text),
        );
    };
    let question = match action {
        Action::Checkpoint(g) => format!("Advance partition {id} to gate {g}?"),
        Action::Retry => format!("Retry the failed items of partition {id}?"),
        other => format!("{other:?} partition {id}?"),
    };
    let done = match action {
        Action::Retry => "retry",
        Action::Pause => "pause",
        Action::Resume => "resume",
        Action::Cancel => "cancel",
        Action::Checkpoint(_) => "checkpoint",
    };
    let ask = Ask {
        path: format!("/partitions/{}/{name}", enc(&id)),
        question,
        back: format!("/partitions/{}", enc(&id)),
        done,
        fields: form
            .gate
            .map(|g| ("gate", g.to_string()))
            .into_iter()
            .collect(),
    };
    act(&c, &headers, form.sent(), ask, async |s| {
        action.apply(s, &id).await
    })
    .await
}

async fn item_retry(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
    _: LoggedIn,
    Form(form): Form<ActionForm>,
) -> Response {
    let back = match async { c.store().await?.item(&id).await }.await {
        Ok(item) => format!("/partitions/{}", enc(&item.partition_id)),
        Err(e) => return failure(e, &c.viewer(&headers)),
    };
    let ask = Ask {
        path: format!("/items/{}/retry", enc(&id)),
        question: format!("Retry item {id}?"),
        back,
        done: "item",
        fields: Vec::new(),
    };
    act(&c, &headers, form.sent(), ask, async |s| {
        s.retry_one(&id).await?;
        tracing::info!(item = %id, "operator retried an item");
        Ok(())
    })
    .await
}

async fn limits_page(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let r = async { c.store().await?.limits().await }.await;
    let body = r.map(|list| views::limits(&list, &viewer, done_message(q.done.as_deref())));
    respond(&viewer, "Limits", body)
}

/// The form that sets a tenant's limits: an empty field keeps its value,
/// `none` removes it.
#[derive(Deserialize)]
struct LimitForm {
    #[serde(default)]
    csrf: String,
    confirm: Option<String>,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    max_in_flight: String,
    #[serde(default)]
    rate: String,
    #[serde(default)]
    burst: String,
    #[serde(default)]
    weight: String,
}

async fn limits_set(
    State(c): State<Console>,
    headers: HeaderMap,
    _: LoggedIn,
    Form(form): Form<LimitForm>,
) -> Response {
    let viewer = c.viewer(&headers);
    let tenant = form.tenant.trim().to_string();
    let change = crate::validate::id("tenant", &tenant).and_then(|()| {
        limits::Change::from_form(&form.max_in_flight, &form.rate, &form.burst, &form.weight)
    });
    let change = match change {
        Ok(change) => change,
        Err(e) => return failure(e, &viewer),
    };
    let sent = Sent {
        csrf: &form.csrf,
        confirmed: form.confirm.as_deref() == Some("yes"),
    };
    // The question shows the limits the change makes from the current ones.
    let question = if sent.confirmed {
        String::new()
    } else {
        match async { limits::current(c.store().await?, &tenant).await }.await {
            Ok(now) => format!(
                "Set the limits of tenant {tenant} to: {}?",
                limits::describe(&change.applied(&now))
            ),
            Err(e) => return failure(e, &viewer),
        }
    };
    let ask = Ask {
        path: "/limits".into(),
        question,
        back: "/limits".into(),
        done: "limits-set",
        fields: vec![
            ("tenant", tenant.clone()),
            ("max_in_flight", form.max_in_flight.clone()),
            ("rate", form.rate.clone()),
            ("burst", form.burst.clone()),
            ("weight", form.weight.clone()),
        ],
    };
    act(&c, &headers, sent, ask, async |s| {
        limits::set(s, &tenant, &change).await.map(|_| ())
    })
    .await
}

async fn limits_clear(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    _: LoggedIn,
    Form(form): Form<ActionForm>,
) -> Response {
    let ask = Ask {
        path: format!("/limits/{}/clear", enc(&tenant)),
        question: format!("Remove the limits of tenant {tenant}?"),
        back: "/limits".into(),
        done: "limits-cleared",
        fields: Vec::new(),
    };
    act(&c, &headers, form.sent(), ask, async |s| {
        if limits::clear(s, &tenant).await? {
            Ok(())
        } else {
            Err(crate::Error::NotFound(format!("limits of tenant {tenant}")))
        }
    })
    .await
}

#[derive(Deserialize)]
struct LoginQuery {
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

async fn login_form(
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
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(
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

async fn logout(
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

/// The note shown after an action; only fixed texts, never the query's own.
fn done_message(done: Option<&str>) -> &'static str {
    match done {
        Some("item") => "The item was put back to available.",
        Some("retry") => "The failed items were put back to available.",
        Some("pause") => "Paused: nothing new is dispatched.",
        Some("resume") => "Resumed.",
        Some("cancel") => "Cancelled.",
        Some("checkpoint") => "The gate was advanced.",
        Some("limits-set") => {
            "The tenant's limits were saved; processors apply them within a heartbeat."
        }
        Some("limits-cleared") => "The tenant's limits were removed.",
        _ => "",
    }
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
