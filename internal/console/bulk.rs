//! Bulk actions: one action (retry failed items, pause, resume, cancel) on
//! every partition a filter matches, through the same code path as one
//! partition's action, a page of partitions at a time. A dry run counts
//! what the filter matches first; every action is recorded in
//! `feed_audit` and logged, with who acted.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::actions::Action;
use super::admit::{Admin, Admitted};
use super::{answer, api_error, json_error};
use crate::store::listing::PartitionFilter;

/// Partitions read and acted on per page.
const BATCH: u64 = 500;

/// `POST /bulk`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Bulk {
    action: String,
    status: Option<String>,
    tenant: Option<String>,
    prefix: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// What a bulk action did (or, in a dry run, would apply to).
#[derive(serde::Serialize)]
struct Done {
    action: &'static str,
    filter: String,
    matched: u64,
    changed: u64,
    dry_run: bool,
    message: String,
}

/// The filter as the audit records it.
fn described(b: &Bulk) -> String {
    let parts = [
        ("status", &b.status),
        ("tenant", &b.tenant),
        ("prefix", &b.prefix),
    ];
    let set: Vec<String> = parts
        .iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| format!("{k}={v}")))
        .collect();
    if set.is_empty() {
        "every partition".into()
    } else {
        set.join(", ")
    }
}

/// `POST /bulk`: applies `action` to every partition the filter matches.
/// The work runs as a task of its own: a request stopped at its time
/// limit does not stop it half-way, and it is recorded when it ends.
pub(super) async fn bulk(admin: Admitted<Admin>, body: Bytes) -> Response {
    let run = tokio::spawn(run(admin.store, body));
    match run.await {
        Ok(r) => r,
        Err(e) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the bulk action stopped: {e}; see GET /api/v1/audit for what it did"),
        ),
    }
}

/// The bulk action itself.
async fn run(store: crate::Store, body: Bytes) -> Response {
    let Ok(b) = serde_json::from_slice::<Bulk>(&body) else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "the body must be JSON: {\"action\": \"retry\"|\"pause\"|\"resume\"|\"cancel\", \"status\"?, \"tenant\"?, \"prefix\"?, \"dry_run\"?}",
        );
    };
    let action = match Action::parse(&b.action, None, None) {
        Some(a @ (Action::Retry | Action::Pause | Action::Resume | Action::Cancel)) => a,
        _ => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "unknown bulk action; use retry, pause, resume or cancel",
            );
        }
    };
    let mut f = PartitionFilter::default();
    (f.status, f.tenant, f.prefix) = (b.status.clone(), b.tenant.clone(), b.prefix.clone());
    f.limit = BATCH;
    let filter = described(&b);
    let (store, actor) = (&store, "api (admin token)");
    let (mut matched, mut changed) = (0u64, 0u64);
    loop {
        let page = match store.partition_ids(&f).await {
            Ok(p) => p,
            Err(e) => {
                return stopped(
                    store,
                    actor,
                    action,
                    &filter,
                    (matched, changed),
                    b.dry_run,
                    e,
                )
                .await;
            }
        };
        matched += page.data.len() as u64;
        if !b.dry_run {
            for id in &page.data {
                match action.apply(store, id).await {
                    Ok(()) => changed += 1,
                    // Not applicable to this one: nothing to retry, already
                    // finished or cancelled; the rest go on.
                    Err(crate::Error::Conflict(_) | crate::Error::NotFound(_)) => {}
                    Err(e) => {
                        let done = (matched, changed);
                        return stopped(store, actor, action, &filter, done, false, e).await;
                    }
                }
            }
        }
        match page.next {
            Some(next) => f.after = Some(next),
            None => break,
        }
    }
    if !b.dry_run {
        tracing::info!(%actor, action = action.name(), %filter, matched, changed, "bulk action");
        if let Err(e) = store
            .record_audit(actor, action.name(), &filter, matched, changed)
            .await
        {
            return json_error(e);
        }
    }
    let message = match (matched, b.dry_run) {
        (0, _) => format!("no partition matches {filter}"),
        (n, true) => format!("{} would apply to {n} partitions ({filter})", action.name()),
        (n, false) => format!(
            "{} changed {changed} of {n} partitions ({filter})",
            action.name()
        ),
    };
    answer(Ok(Done {
        action: action.name(),
        filter,
        matched,
        changed,
        dry_run: b.dry_run,
        message,
    }))
}

/// A bulk action cut short by an error: what was done is recorded first.
async fn stopped(
    store: &crate::Store,
    actor: &str,
    action: Action,
    filter: &str,
    (matched, changed): (u64, u64),
    dry_run: bool,
    e: crate::Error,
) -> Response {
    if !dry_run && changed > 0 {
        let what = format!("{} (stopped: {e})", action.name());
        let _ = store
            .record_audit(actor, &what, filter, matched, changed)
            .await;
    }
    json_error(e)
}

/// `GET /audit`: the last bulk actions, newest first.
pub(super) async fn audit(admin: Admitted<Admin>) -> Response {
    answer(admin.store.audit(100).await)
}
