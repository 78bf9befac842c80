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
use super::matching::Matching;
use super::{answer, api_error, json_error};

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
    gate: Option<i64>,
    older_than: Option<String>,
    error: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// What a bulk action did (or, in a dry run, would apply to).
#[derive(serde::Serialize)]
pub(super) struct Done {
    action: &'static str,
    filter: String,
    pub(super) matched: u64,
    changed: u64,
    dry_run: bool,
    pub(super) message: String,
}

/// The actions a filter may apply in bulk.
pub(super) fn action(name: &str) -> Option<Action> {
    match Action::parse(name, None, None) {
        Some(a @ (Action::Retry | Action::Pause | Action::Resume | Action::Cancel)) => Some(a),
        _ => None,
    }
}

/// `POST /bulk`: applies `action` to every partition the filter matches.
pub(super) async fn bulk(admin: Admitted<Admin>, body: Bytes) -> Response {
    let Ok(b) = serde_json::from_slice::<Bulk>(&body) else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "the body must be JSON: {\"action\": \"retry\"|\"pause\"|\"resume\"|\"cancel\", \"status\"?, \"tenant\"?, \"prefix\"?, \"gate\"?, \"older_than\"?, \"error\"?, \"dry_run\"?}",
        );
    };
    let Some(action) = action(&b.action) else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "unknown bulk action; use retry, pause, resume or cancel",
        );
    };
    let actor = "api (admin token)".to_string();
    let filter = Matching {
        status: b.status,
        tenant: b.tenant,
        prefix: b.prefix,
        gate: b.gate.map(|g| g.to_string()),
        older_than: b.older_than,
        error: b.error,
    };
    match spawned(admin.store, actor, action, filter, b.dry_run).await {
        Ok(done) => answer(Ok(done)),
        Err(e) => json_error(e),
    }
}

/// Runs [`apply`] as a task of its own: a request stopped at its time
/// limit does not stop it half-way, and it is recorded when it ends.
pub(super) async fn spawned(
    store: crate::Store,
    actor: String,
    action: Action,
    filter: Matching,
    dry_run: bool,
) -> crate::Result<Done> {
    let run = tokio::spawn(async move { apply(&store, &actor, action, &filter, dry_run).await });
    run.await.unwrap_or_else(|e| {
        Err(crate::Error::Unavailable(format!(
            "the bulk action stopped: {e}; the audit says what it did"
        )))
    })
}

/// Applies `action` to every partition `filter` matches, a page at a
/// time, through the one-partition code path; records it in the audit
/// and the log (what it did so far, when an error stops it).
pub(super) async fn apply(
    store: &crate::Store,
    actor: &str,
    action: Action,
    filter: &Matching,
    dry_run: bool,
) -> crate::Result<Done> {
    let mut f = filter.filter()?;
    f.limit = BATCH;
    let described = filter.described();
    let (mut matched, mut changed) = (0u64, 0u64);
    let stopped = async |e: crate::Error, matched, changed| {
        if !dry_run && changed > 0 {
            let what = format!("{} (stopped: {e})", action.name());
            let _ = store
                .record_audit(actor, &what, &described, matched, changed)
                .await;
        }
        Err(e)
    };
    loop {
        let page = match store.partition_ids(&f).await {
            Ok(p) => p,
            Err(e) => return stopped(e, matched, changed).await,
        };
        matched += page.data.len() as u64;
        if !dry_run {
            for id in &page.data {
                match action.apply(store, id).await {
                    Ok(()) => changed += 1,
                    // Not applicable to this one: nothing to retry, already
                    // finished or cancelled; the rest go on.
                    Err(crate::Error::Conflict(_) | crate::Error::NotFound(_)) => {}
                    Err(e) => return stopped(e, matched, changed).await,
                }
            }
        }
        match page.next {
            Some(next) => f.after = Some(next),
            None => break,
        }
    }
    if !dry_run {
        tracing::info!(%actor, action = action.name(), filter = %described, matched, changed, "bulk action");
        store
            .record_audit(actor, action.name(), &described, matched, changed)
            .await?;
    }
    let message = match (matched, dry_run) {
        (0, _) => format!("no partition matches {described}"),
        (n, true) => format!(
            "{} would apply to {n} partitions ({described})",
            action.name()
        ),
        (n, false) => format!(
            "{} changed {changed} of {n} partitions ({described})",
            action.name()
        ),
    };
    Ok(Done {
        action: action.name(),
        filter: described,
        matched,
        changed,
        dry_run,
        message,
    })
}

/// `GET /audit`: the last bulk actions, newest first.
pub(super) async fn audit(admin: Admitted<Admin>) -> Response {
    answer(admin.store.audit(100).await)
}
