//! The JSON API's reads of partitions, items, limits and the status: open
//! to anyone, as the pages are; each answers the store's view as JSON.

use axum::extract::{Path, Query};
use axum::response::Response;
use serde::Deserialize;

use super::admit::{Admitted, Open};
use super::answer;
use super::matching::Matching;
use crate::store::listing::{DataMatch, ItemFilter};

pub(super) async fn status(open: Admitted<Open>) -> Response {
    answer(open.store.status(None).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PartitionQuery {
    status: Option<String>,
    prefix: Option<String>,
    tenant: Option<String>,
    gate: Option<String>,
    older_than: Option<String>,
    error: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

pub(super) async fn partitions(Query(q): Query<PartitionQuery>, open: Admitted<Open>) -> Response {
    let m = Matching {
        status: q.status,
        prefix: q.prefix,
        tenant: q.tenant,
        gate: q.gate,
        older_than: q.older_than,
        error: q.error,
    };
    let r = async {
        let mut f = m.filter()?;
        f.after = q.after.filter(|s| !s.is_empty());
        f.limit = q.limit.unwrap_or(50);
        open.store.partitions(&f).await
    };
    answer(r.await)
}

pub(super) async fn partition(Path(id): Path<String>, open: Admitted<Open>) -> Response {
    answer(open.store.partition(&id).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ItemQuery {
    gate: Option<i64>,
    status: Option<String>,
    prefix: Option<String>,
    data: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

pub(super) async fn items(
    Path(id): Path<String>,
    Query(q): Query<ItemQuery>,
    open: Admitted<Open>,
) -> Response {
    let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let f = ItemFilter {
        gate: q.gate,
        status: given(q.status),
        prefix: given(q.prefix),
        after: given(q.after),
        limit: q.limit.unwrap_or(50),
    };
    let r = async {
        match given(q.data) {
            Some(d) => {
                open.store
                    .search_items(&id, &DataMatch::parse(&d)?, &f)
                    .await
            }
            None => open.store.items(&id, &f).await,
        }
    };
    answer(r.await)
}

pub(super) async fn list_limits(open: Admitted<Open>) -> Response {
    answer(open.store.limits().await)
}
