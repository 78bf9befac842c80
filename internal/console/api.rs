//! The JSON API under `/api/v1`: the same reads as the pages and the same
//! controls as the command line. Actions answer 200 with the new state,
//! 401 without a valid bearer token, 403 when no admin token is
//! configured, 404 for an unknown id and 409 when the action does not apply.
//! Tenants' limits (`/limits`) are read like the rest and changed (`PUT`,
//! `DELETE`) with the admin token, as `processor limits` changes them.
//! Enqueueing (`POST /partitions/{id}/items`, see `enqueue`) also takes the
//! producer token. This file is the list of routes; the reads are in
//! `reads`, the controls in `actions`.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post, put};

use super::actions::{ItemAt, act, clear_limit, retry_item, set_limit};
use super::endpoints::{Access, Endpoint, fields, no_query};
use super::errors::json_only;
use super::reads::{ItemQuery, PartitionQuery, items, list_limits, partition, partitions, status};
use super::{Console, api_error, completion, enqueue, json_errors, schedules, tokens};

/// Every route of the API, in the order the reference lists them.
pub fn endpoints() -> Vec<Endpoint> {
    table().into_iter().map(|(e, _)| e).collect()
}

/// Every route with what the reference says of it; `routes` serves
/// exactly these.
pub(super) fn table() -> Vec<(Endpoint, MethodRouter<Console>)> {
    use Access::{Admin, Open, Producer};
    let e = |method, path, query, body, access, answer| Endpoint {
        method,
        path,
        query,
        body,
        access,
        answer,
    };
    vec![
        (
            e(
                "GET",
                "/status",
                no_query,
                "",
                Open,
                "the same document as `processor status --json`",
            ),
            get(status),
        ),
        (
            e(
                "GET",
                "/partitions",
                fields::<PartitionQuery>,
                "",
                Open,
                "`{\"data\": [partition…], \"next\": id or null}`, in id order",
            ),
            get(partitions),
        ),
        (
            e(
                "GET",
                "/partitions/{id}",
                no_query,
                "",
                Open,
                "one partition with `items_by_status` and `items_by_gate`",
            ),
            get(partition),
        ),
        (
            e(
                "GET",
                "/partitions/{id}/items",
                fields::<ItemQuery>,
                "",
                Open,
                "`{\"data\": [item…], \"next\": id or null}`",
            ),
            get(items),
        ),
        (
            e(
                "POST",
                "/partitions/{id}/items",
                fields::<enqueue::EnqueueQuery>,
                "a JSON array of items, or JSON lines",
                Producer,
                "enqueues the items in one transaction: `{partition, items, created, reopened, failed, ids}`",
            ),
            post(enqueue::enqueue.layer(DefaultBodyLimit::max(enqueue::MAX_ENQUEUE_BODY_BYTES))),
        ),
        (
            e(
                "GET",
                "/partitions/{id}/items.ndjson",
                fields::<completion::ExportQuery>,
                "",
                Open,
                "the partition's items as JSON lines in write order, streamed: the lines of `processor export` (`application/x-ndjson`)",
            ),
            get(completion::export),
        ),
        (
            e(
                "POST",
                "/partitions/{id}/{action}",
                no_query,
                "`{\"gate\": N}` for `checkpoint`, `{\"priority\": N}` for `priority`, else none",
                Admin,
                "`action` is `retry` (its failed items), `pause`, `resume`, `cancel`, `checkpoint` (a manual partition) or `priority` (-1000 to 1000), as the commands; answers the partition",
            ),
            post(act),
        ),
        (
            e(
                "POST",
                "/bulk",
                no_query,
                "`{\"action\": \"retry\"|\"pause\"|\"resume\"|\"cancel\", \"status\"?: S, \"tenant\"?: T, \"prefix\"?: P, \"gate\"?: N, \"older_than\"?: \"2h\", \"error\"?: E, \"dry_run\"?: true}` (the filter of `GET /api/v1/partitions`)",
                Admin,
                "applies the action to every partition the filter matches, 500 at a time, and records it in `feed_audit`: `{action, filter, matched, changed, dry_run, message}` (`dry_run` only counts; a filter matching nothing says so in `message`)",
            ),
            post(super::bulk::bulk),
        ),
        (
            e(
                "GET",
                "/audit",
                no_query,
                "",
                Admin,
                "the last 100 bulk actions, newest first: `[{id, at, actor, action, filter, matched, changed}…]`",
            ),
            get(super::bulk::audit),
        ),
        (
            e(
                "POST",
                "/items/{id}/retry",
                fields::<ItemAt>,
                "",
                Admin,
                "retries one failed item; answers the item. Item ids are unique within a partition: `partition` says whose item (without it, the one partition with an item by that id; 409 when several have one)",
            ),
            post(retry_item),
        ),
        (
            e(
                "GET",
                "/events",
                fields::<completion::EventQuery>,
                "",
                Open,
                "completion events, oldest first: `[{id, partition_id, kind, gate, counts, status, attempts, last_error, created_at}…]`",
            ),
            get(completion::events),
        ),
        (
            e(
                "POST",
                "/events/retry",
                no_query,
                "`{}`, `{\"partition\": ID}` or `{\"id\": N}`",
                Admin,
                "failed events back to pending: `{\"retried\": n}`",
            ),
            post(completion::retry),
        ),
        (
            e(
                "GET",
                "/producer-tokens",
                no_query,
                "",
                Admin,
                "the producer tokens' scopes, oldest first: `[{id, tenant, prefix, max_weight, max_in_flight, created_at}…]`",
            ),
            get(tokens::list),
        ),
        (
            e(
                "POST",
                "/producer-tokens",
                no_query,
                "`{\"tenant\": T, \"prefix\"?: P, \"max_weight\"?: N, \"max_in_flight\"?: N}`",
                Admin,
                "creates a producer token: its scope and, this once, `token`; 409 when its prefix overlaps (one starts with the other) another tenant's token's prefix",
            ),
            post(tokens::create),
        ),
        (
            e(
                "DELETE",
                "/producer-tokens/{id}",
                no_query,
                "",
                Admin,
                "revokes it: `{\"id\": …, \"revoked\": true}`; 404 when there is none",
            ),
            axum::routing::delete(tokens::revoke),
        ),
        (
            e(
                "GET",
                "/limits",
                no_query,
                "",
                Open,
                "every tenant's limits, by tenant: `[{tenant, max_in_flight, rate, burst, weight}…]` (`rate` in items per second; `null` = no limit)",
            ),
            get(list_limits),
        ),
        (
            e(
                "PUT",
                "/limits/{tenant}",
                no_query,
                "`{\"max_in_flight\": N, \"rate\": \"100/s\", \"burst\": N, \"weight\": N}`",
                Admin,
                "sets a tenant's limits, as `processor limits set`: a field left out keeps its value, `null` removes it, `max_in_flight: 0` is no cap, `rate` is `\"500/s\"`, `\"30/m\"`, `\"1000/h\"` or a number of items per second, `weight` runs from 1 to 1000; answers the tenant's limits",
            ),
            put(set_limit),
        ),
        (
            e(
                "DELETE",
                "/limits/{tenant}",
                no_query,
                "",
                Admin,
                "removes a tenant's limits: `{\"tenant\": …, \"removed\": true}` (`false` when it had none)",
            ),
            axum::routing::delete(clear_limit),
        ),
        (
            e(
                "GET",
                "/schedules",
                no_query,
                "",
                Open,
                "the schedules, by name: `[{name, cron, timezone, partition, backfill, next_tick, last_partition, last_error, updated_at}…]` (times in epoch ms)",
            ),
            get(schedules::list),
        ),
        (
            e(
                "PUT",
                "/schedules/{name}",
                no_query,
                "`{\"cron\": \"0 2 * * *\", \"timezone\"?: \"UTC\", \"backfill\"?: N, \"partition\"?: {tenant, auto_close, manual_checkpoint, on_failure, gate_events, weight, max_in_flight, priority}, \"items\": [{\"id\"?, \"gate\"?, \"data\"}…]}`",
                Admin,
                "creates or replaces a schedule, as `processor schedules set`; answers it",
            ),
            put(schedules::set),
        ),
        (
            e(
                "DELETE",
                "/schedules/{name}",
                no_query,
                "",
                Admin,
                "removes a schedule (its partitions stay): `{\"name\": …, \"removed\": true}`; 404 when there is none",
            ),
            axum::routing::delete(schedules::remove),
        ),
    ]
}

pub(super) fn routes() -> Router<Console> {
    // Static segments win over `{action}`, so the item POST is never an action.
    table()
        .into_iter()
        .fold(Router::new(), |r, (e, route)| r.route(e.path, route))
        .fallback(|| async {
            api_error(
                StatusCode::NOT_FOUND,
                "no such API path; see the book's reference: HTTP API",
            )
        })
        .layer(axum::middleware::from_fn(json_only))
        .layer(axum::middleware::map_response(json_errors))
}

#[cfg(test)]
mod tests {
    use super::endpoints;

    #[test]
    fn every_route_is_listed_once() {
        let list = endpoints();
        let mut seen = std::collections::HashSet::new();
        for e in &list {
            assert!(
                seen.insert((e.method, e.path)),
                "{} {} twice",
                e.method,
                e.path
            );
        }
        assert!(
            list.iter()
                .any(|e| e.path == "/partitions/{id}/items" && e.method == "POST")
        );
    }
}
