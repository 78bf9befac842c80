//! The JSON API's reads of partitions, items, limits and the status: open
//! to anyone, as the pages are; each answers the store's view as JSON.

use axum::extract::{Path, Query};
use axum::response::Response;
use serde::Deserialize;

use super::admit::{Admitted, Open};
use super::answer;
use crate::store::listing::{ItemFilter, PartitionFilter};

pub(super) async fn status(open: Admitted<Open>) -> Response {
    answer(open.store.status(None).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PartitionQuery {
    status: Option<String>,
    prefix: Option<String>,
    tenant: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

pub(super) async fn partitions(Query(q): Query<PartitionQuery>, open: Admitted<Open>) -> Response {
    let f = PartitionFilter {
        status: q.status.filter(|s| !s.is_empty()),
        prefix: q.prefix,
        tenant: q.tenant.filter(|t| !t.is_empty()),
        after: q.after.filter(|s| !s.is_empty()),
        limit: q.limit.unwrap_or(50),
    };
    answer(open.store.partitions(&f).await)
}

pub(super) async fn partition(Path(id): Path<String>, open: Admitted<Open>) -> Response {
    answer(open.store.partition(&id).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ItemQuery {
    gate: Option<i64>,
    status: Option<String>,
    after: Option<String>,
    limit: Option<u64>,
}

pub(super) async fn items(
    Path(id): Path<String>,
    Query(q): Query<ItemQuery>,
    open: Admitted<Open>,
) -> Response {
    let f = ItemFilter {
        gate: q.gate,
        status: q.status.filter(|s| !s.is_empty()),
        after: q.after.filter(|s| !s.is_empty()),
        limit: q.limit.unwrap_or(50),
    };
    answer(open.store.items(&id, &f).await)
}

pub(super) async fn list_limits(open: Admitted<Open>) -> Response {
    answer(open.store.limits().await)
}
