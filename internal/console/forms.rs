//! The dashboard's actions. Every action is a POST form that first renders
//! a confirmation page (so confirming needs no script), then acts with the
//! same code as the API (tenants' limits: the same code as `PUT`/`DELETE
//! /api/v1/limits`) and goes back to the page it came from.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::actions::{Action, ItemAt};
use super::admit::{Admitted, LoggedIn};
use super::html::{failure, page};
use super::matching::Matching;
use super::views::{self, enc};
use super::{Console, auth, bulk, limits};
use crate::Store;

#[derive(Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    pub(super) csrf: String,
    confirm: Option<String>,
    gate: Option<i64>,
    priority: Option<i32>,
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

/// Checks the form, asks for confirmation, then acts on `store` and goes
/// back to the page.
async fn act(
    c: &Console,
    headers: &HeaderMap,
    store: &Store,
    form: Sent<'_>,
    ask: Ask,
    run: impl AsyncFnOnce(&Store) -> crate::Result<()>,
) -> Response {
    let viewer = c.viewer(headers);
    if let Err((code, text)) = auth::check_form(c.token.as_ref(), &c.sessions, headers, form.csrf) {
        return page(code, "Not allowed", &viewer, views::message(text));
    }
    if !form.confirmed {
        let body = views::confirm(&ask.question, &ask.path, form.csrf, &ask.fields, &ask.back);
        return page(StatusCode::OK, "Confirm", &viewer, body);
    }
    match run(store).await {
        Ok(()) => Redirect::to(&format!("{}?done={}", ask.back, ask.done)).into_response(),
        Err(e) => failure(e, &viewer),
    }
}

pub(super) async fn partition_action(
    State(c): State<Console>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
    admitted: Admitted<LoggedIn>,
    Form(form): Form<ActionForm>,
) -> Response {
    let viewer = c.viewer(&headers);
    let Some(action) = Action::parse(&name, form.gate, form.priority) else {
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
        Action::Priority(p) => format!("Set the priority of partition {id} to {p}?"),
        other => format!("{other:?} partition {id}?"),
    };
    let done = action.name();
    let ask = Ask {
        path: format!("/partitions/{}/{name}", enc(&id)),
        question,
        back: format!("/partitions/{}", enc(&id)),
        done,
        fields: [
            form.gate.map(|g| ("gate", g.to_string())),
            form.priority.map(|p| ("priority", p.to_string())),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    act(&c, &headers, &admitted.store, form.sent(), ask, async |s| {
        action.apply(s, &id).await
    })
    .await
}

pub(super) async fn item_retry(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(at): Query<ItemAt>,
    admitted: Admitted<LoggedIn>,
    Form(form): Form<ActionForm>,
) -> Response {
    let store = &admitted.store;
    let partition = match store.item(at.partition.as_deref(), &id).await {
        Ok(item) => item.partition_id,
        Err(e) => return failure(e, &c.viewer(&headers)),
    };
    let back = format!("/partitions/{}", enc(&partition));
    let ask = Ask {
        path: format!("/items/{}/retry?partition={}", enc(&id), enc(&partition)),
        question: format!("Retry item {id}?"),
        back,
        done: "item",
        fields: Vec::new(),
    };
    act(&c, &headers, store, form.sent(), ask, async |s| {
        s.retry_one(Some(&partition), &id).await?;
        tracing::info!(item = %id, partition = %partition, "operator retried an item");
        Ok(())
    })
    .await
}

/// The form that sets a tenant's limits: an empty field keeps its value,
/// `none` removes it.
#[derive(Deserialize)]
pub(super) struct LimitForm {
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

pub(super) async fn limits_set(
    State(c): State<Console>,
    headers: HeaderMap,
    admitted: Admitted<LoggedIn>,
    Form(form): Form<LimitForm>,
) -> Response {
    let viewer = c.viewer(&headers);
    let store = &admitted.store;
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
        match limits::current(store, &tenant).await {
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
    act(&c, &headers, store, sent, ask, async |s| {
        limits::set(s, &tenant, &change).await.map(|_| ())
    })
    .await
}

pub(super) async fn limits_clear(
    State(c): State<Console>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
    admitted: Admitted<LoggedIn>,
    Form(form): Form<ActionForm>,
) -> Response {
    let ask = Ask {
        path: format!("/limits/{}/clear", enc(&tenant)),
        question: format!("Remove the limits of tenant {tenant}?"),
        back: "/limits".into(),
        done: "limits-cleared",
        fields: Vec::new(),
    };
    act(&c, &headers, &admitted.store, form.sent(), ask, async |s| {
        if limits::clear(s, &tenant).await? {
            Ok(())
        } else {
            Err(crate::Error::NotFound(format!("limits of tenant {tenant}")))
        }
    })
    .await
}

/// The partitions page's bulk form: an action and the list's filter.
#[derive(Deserialize)]
pub(super) struct BulkForm {
    #[serde(default)]
    csrf: String,
    confirm: Option<String>,
    #[serde(default)]
    action: String,
    #[serde(flatten)]
    matching: Matching,
}

/// `POST /bulk` (a page form): counts what the filter matches and asks; once
/// confirmed, applies the action to every one (as `POST /api/v1/bulk`
/// does) and shows the audit, where it is recorded with the login.
pub(super) async fn partitions_bulk(
    State(c): State<Console>,
    headers: HeaderMap,
    admitted: Admitted<LoggedIn>,
    Form(form): Form<BulkForm>,
) -> Response {
    let viewer = c.viewer(&headers);
    let Some(action) = bulk::action(&form.action) else {
        let text = "unknown bulk action; use retry, pause, resume or cancel";
        return page(
            StatusCode::BAD_REQUEST,
            "Error",
            &viewer,
            views::message(text),
        );
    };
    let filter = form.matching.clone();
    let sent = Sent {
        csrf: &form.csrf,
        confirmed: form.confirm.as_deref() == Some("yes"),
    };
    let store = &admitted.store;
    // The question counts what the filter matches now.
    let question = if sent.confirmed {
        String::new()
    } else {
        let counted = bulk::apply(store, "", action, &filter, true).await;
        match counted {
            Ok(d) if d.matched == 0 => {
                let body = views::message(&format!("{}; nothing to do.", d.message));
                return page(StatusCode::OK, "Nothing matches", &viewer, body);
            }
            Ok(d) => format!(
                "{} every partition matching {}: {} partitions?",
                views::audit::verb(action.name()),
                filter.described(),
                d.matched
            ),
            Err(e) => return failure(e, &viewer),
        }
    };
    let ask = Ask {
        path: "/bulk".into(),
        question,
        back: "/audit".into(),
        done: "bulk",
        fields: [("action", form.action.clone())]
            .into_iter()
            .chain(form.matching.fields())
            .collect(),
    };
    let actor = auth::login_tag(&headers);
    act(&c, &headers, store, sent, ask, async |s| {
        bulk::spawned(s.clone(), actor, action, filter, false)
            .await
            .map(|_| ())
    })
    .await
}

/// The note shown after an action; only fixed texts, never the query's own.
pub(super) fn done_message(done: Option<&str>) -> &'static str {
    match done {
        Some("item") => "The item was put back to available.",
        Some("retry") => "The failed items were put back to available.",
        Some("pause") => "Paused: nothing new is dispatched.",
        Some("resume") => "Resumed.",
        Some("cancel") => "Cancelled.",
        Some("checkpoint") => "The gate was advanced.",
        Some("priority") => "The priority was set; its processor serves by it from its next cycle.",
        Some("limits-set") => {
            "The tenant's limits were saved; processors apply them within a heartbeat."
        }
        Some("limits-cleared") => "The tenant's limits were removed.",
        Some("bulk") => "The bulk action ran; its record is the newest below.",
        _ => "",
    }
}
