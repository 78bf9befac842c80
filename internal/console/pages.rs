//! The dashboard's routes: pages, login, form actions and embedded assets.
//! Pages only read; the forms that act are in `forms`, the login in
//! `login`.

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::forms::{self, done_message};
use super::html::{html_live, page, respond};
use super::matching::Matching;
use super::views::{self, Viewer};
use super::{Console, login};
use crate::store::listing::{DataMatch, ItemFilter};

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
        .route("/partitions/{id}/{action}", post(forms::partition_action))
        .route("/items/{id}/retry", post(forms::item_retry))
        .route("/processors", get(processors))
        .route("/limits", get(limits_page).post(forms::limits_set))
        .route("/schedules", get(schedules_page))
        .route("/bulk", post(forms::partitions_bulk))
        .route("/audit", get(audit_page))
        .route("/limits/{tenant}/clear", post(forms::limits_clear))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(login::logout))
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

async fn overview(State(c): State<Console>, viewer: Viewer) -> Response {
    match async { c.store().await?.overview().await }.await {
        Ok(o) => respond(
            &viewer,
            "Overview",
            Ok(html_live(views::fleet::overview(&o))),
        ),
        Err(e) => {
            let (code, why) = super::errors::public(e);
            page(
                code,
                "Overview",
                &viewer,
                html_live(views::fleet::unknown(&why)),
            )
        }
    }
}

#[derive(Deserialize, Default)]
struct ListQuery {
    status: Option<String>,
    after: Option<String>,
    done: Option<String>,
    /// A partition's item search: ids starting with this.
    prefix: Option<String>,
    /// A partition's item search: a field of the data (`customer = "acme"`).
    data: Option<String>,
}

/// The partitions page's query: its filter and where the page starts.
#[derive(Deserialize, Default)]
struct PartitionsQuery {
    #[serde(flatten)]
    matching: Matching,
    after: Option<String>,
}

async fn partitions(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<PartitionsQuery>,
) -> Response {
    let r = async {
        let mut f = q.matching.filter()?;
        f.after = q.after.filter(|s| !s.is_empty());
        f.limit = PAGE;
        c.store().await?.partitions(&f).await
    }
    .await;
    let body = r.map(|p| views::partitions::partitions(&p, &q.matching.fields(), &viewer));
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
        let given = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
        let all = ItemFilter {
            status: given(&q.status),
            prefix: given(&q.prefix),
            after: given(&q.after),
            limit: PAGE,
            ..Default::default()
        };
        let items = match given(&q.data) {
            Some(d) => s.search_items(&id, &DataMatch::parse(&d)?, &all).await?,
            None => s.items(&id, &all).await?,
        };
        let search = [
            ("status", &q.status),
            ("prefix", &q.prefix),
            ("data", &q.data),
        ]
        .map(|(n, v)| (n, v.clone().unwrap_or_default()));
        Ok::<_, crate::Error>(views::partitions::partition(
            &p,
            &viewer,
            views::partitions::Lists {
                failed: &failed,
                retrying: &retrying,
                items: &items,
                owner: &held,
                search: &search,
            },
            done_message(q.done.as_deref()),
        ))
    }
    .await;
    respond(&viewer, &format!("Partition {id}"), r)
}

async fn processors(State(c): State<Console>, viewer: Viewer) -> Response {
    let r = async { c.store().await?.processors().await }.await;
    let body = r.map(|list| html_live(views::fleet::processors(&list)));
    respond(&viewer, "Processors", body)
}

async fn limits_page(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Response {
    let r = async { c.store().await?.limits().await }.await;
    let done = done_message(q.done.as_deref());
    let body = r.map(|list| views::limits::limits(&list, &viewer, done));
    respond(&viewer, "Limits", body)
}

/// The bulk actions' record: for a logged-in admin only, as the API's.
async fn audit_page(
    State(c): State<Console>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Response {
    if !matches!(viewer, Viewer::Admin(_)) {
        let text = "log in with the admin token to see the audit";
        return page(
            axum::http::StatusCode::UNAUTHORIZED,
            "Audit",
            &viewer,
            views::message(text),
        );
    }
    let r = async { c.store().await?.audit(100).await }.await;
    let done = done_message(q.done.as_deref());
    let body = r.map(|list| views::audit::audit(&list, done));
    respond(&viewer, "Audit", body)
}

async fn schedules_page(State(c): State<Console>, viewer: Viewer) -> Response {
    let r = async { c.store().await?.schedules().await }.await;
    let body = r.map(|list| html_live(views::schedules::schedules(&list)));
    respond(&viewer, "Schedules", body)
}
