//! The partitions' pages: the filtered list, and one partition with its
//! gates, its failed and waiting items, and the actions it allows.

use maud::{Markup, html};

use super::fleet::held_banner;
use super::{
    ITEM_STATUSES, PARTITION_STATUSES, Viewer, action, bar, cut, duration, enc, status_badge,
    summary, text, time,
};
use crate::store::listing::{ItemView, Page, PartitionView};
use crate::store::status::ProcessorStatus;

/// Characters of item data shown in a table.
const DATA_CHARS: usize = 200;
/// Characters of `last_error` shown in a table.
const ERROR_CHARS: usize = 300;

/// A partition's scheduled items: how many, and when the first comes due.
fn scheduled(p: &PartitionView) -> String {
    match (p.next_due, p.next_due_in_ms) {
        (Some(due), Some(due_in)) if p.scheduled_items > 0 => {
            let secs = std::time::Duration::from_secs(u64::try_from(due_in / 1000).unwrap_or(0));
            format!(
                "{}, next {} (in {})",
                p.scheduled_items,
                time(due),
                humantime::format_duration(secs)
            )
        }
        _ => "-".into(),
    }
}

/// A filter field's value in `fields` (name, value).
fn field<'a>(fields: &'a [(&str, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, v)| v.as_str())
}

/// `fields` is the filter as given (every field, "" when not set).
pub(crate) fn partitions(
    page: &Page<PartitionView>,
    fields: &[(&str, String)],
    viewer: &Viewer,
) -> Markup {
    let status = field(fields, "status");
    let query: String = fields
        .iter()
        .map(|(n, v)| format!("{n}={}&", enc(v)))
        .collect();
    html! {
        form.filters method="get" action="/partitions" {
            label { "Status " select name="status" {
                option value="" { "any" }
                @for s in PARTITION_STATUSES { option value=(s) selected[status == s] { (s) } }
            } }
            label { "Id starts with " input type="search" name="prefix" value=(field(fields, "prefix")); }
            label { "Tenant " input type="search" name="tenant" value=(field(fields, "tenant")); }
            label { "Gate " input type="number" min="0" name="gate" value=(field(fields, "gate")); }
            label title="created at least this long ago: 30m, 2h, 1d" { "Older than " input type="search" name="older_than" placeholder="2h" value=(field(fields, "older_than")); }
            label title="text in the last error of one of its items (any case)" { "Error text " input type="search" name="error" value=(field(fields, "error")); }
            button type="submit" { "Filter" }
        }
        @if let Viewer::Admin(csrf) = viewer {
            // Acts on every partition the filter above matches (all
            // pages); the next page counts them and asks first.
            form.bulk #bulk method="post" action="/bulk" {
                input type="hidden" name="csrf" value=(csrf);
                @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
                label { "To every matching partition: " select name="action" {
                    option value="retry" { "retry failed items" }
                    option value="pause" { "pause" }
                    option value="resume" { "resume" }
                    option value="cancel" { "cancel" }
                } }
                button type="submit" { "Apply…" }
            }
        }
        div #live {
            table {
                thead { tr { th { "partition" } th { "tenant" } th { "status" } th { "gate" } th { "owner" } th { "progress by gate" } th title="available items that wait for their scheduled time" { "scheduled" } th title="items completed per second over the last 5 minutes" { "rate" } th title="until its available items are done at that rate" { "ETA" } } }
                tbody {
                    @for p in &page.data {
                        tr.partition data-id=(p.id) {
                            td { a href={ "/partitions/" (enc(&p.id)) } { (text(&p.id)) } }
                            td.tenant { (text(p.tenant.as_deref().unwrap_or("-"))) }
                            td { (status_badge(&p.status, p.paused)) }
                            td { (p.gate) }
                            td { code { (p.owner.as_deref().map(|o| cut(o, 8)).unwrap_or_else(|| "-".into())) } }
                            td { @for (g, counts) in &p.items_by_gate {
                                div.gate { span { "gate " (g) } (bar(counts)) span.summary { (summary(counts)) } }
                            } }
                            td.scheduled { (scheduled(p)) }
                            td.rate { (format!("{:.2}/s", p.rate)) }
                            td.eta { (eta(p)) }
                        }
                    }
                }
            }
            @if page.data.is_empty() { p.muted { "No partitions match." } }
            @if let Some(next) = &page.next {
                a.next href={ "/partitions?" (query) "after=" (enc(next)) } { "Next page →" }
            }
        }
    }
}

/// The item lists of a partition's page, and its owner's session.
pub(crate) struct Lists<'a> {
    /// Its failed items first.
    pub failed: &'a [ItemView],
    /// Its items waiting to retry after a failed attempt.
    pub retrying: &'a [ItemView],
    /// A page of all its items.
    pub items: &'a Page<ItemView>,
    /// The session that holds it (none when it is not held).
    pub owner: &'a [ProcessorStatus],
    /// The item search as given: status, prefix, data ("" when not set).
    pub search: &'a [(&'static str, String)],
}

pub(crate) fn partition(
    p: &PartitionView,
    viewer: &Viewer,
    lists: Lists<'_>,
    done: &str,
) -> Markup {
    let base = format!("/partitions/{}", enc(&p.id));
    let Lists {
        failed,
        retrying,
        items,
        owner,
        search,
    } = lists;
    let query: String = search
        .iter()
        .map(|(n, v)| format!("{n}={}&", enc(v)))
        .collect();
    let searched = !field(search, "data").is_empty();
    html! {
        @if !done.is_empty() { p.flash { (done) } }
        div #live {
            (held_banner(owner))
            dl.facts {
                dt { "status" } dd #status { (status_badge(&p.status, p.paused)) }
                dt { "gate" } dd #gate { (p.gate) }
                dt { "owner" } dd { code { (p.owner.as_deref().unwrap_or("-")) } }
                dt { "tenant" } dd #tenant {
                    @match &p.tenant {
                        Some(t) => a href="/limits" title="the tenants' limits" { (text(t)) },
                        None => "-",
                    }
                }
                dt title="served before the lower-priority partitions it shares turns with" { "priority" } dd #priority { (p.priority) }
                dt { "settings" } dd { "auto_close " (p.auto_close) ", manual_checkpoint " (p.manual_checkpoint) ", on_failure " (p.on_failure) }
                dt { "updated" } dd { (time(p.updated_at)) }
                dt title="since it was created" { "age" } dd #age { (p.age_ms.map_or("unknown".into(), duration)) }
                dt title="items completed per second over the last 5 minutes" { "rate" } dd #rate { (format!("{:.2}/s", p.rate)) }
                dt title="until its available items are done at that rate" { "ETA" } dd #eta { (eta(p)) }
                dt title="available items that wait for their scheduled time" { "scheduled" } dd #scheduled { (scheduled(p)) }
            }
            div.actions {
                @match viewer {
                    Viewer::ReadOnly => p.muted { "Read-only: start the dashboard with --admin-token to act." },
                    Viewer::LoggedOut => p.muted { a href={ "/login?next=" (enc(&base)) } { "Log in" } " to act." },
                    Viewer::Admin(_) => {
                        @if p.items_by_status.contains_key("failed") && p.status != "cancelled" { (action(viewer, &format!("{base}/retry"), "Retry failed items", None)) }
                        @if p.paused { (action(viewer, &format!("{base}/resume"), "Resume", None)) }
                        @else if p.status == "available" || p.status == "failed" { (action(viewer, &format!("{base}/pause"), "Pause", None)) }
                        @if p.manual_checkpoint && p.status == "available" { (action(viewer, &format!("{base}/checkpoint"), "Advance gate", Some(p.gate + 1))) }
                        @if p.status != "complete" && p.status != "cancelled" {
                            (priority_form(viewer, &format!("{base}/priority"), p.priority))
                            (action(viewer, &format!("{base}/cancel"), "Cancel", None))
                        }
                    },
                }
            }
            h2 { "Gates" }
            table.gates {
                thead { tr { th { "gate" } @for s in ITEM_STATUSES { th { (s) } } th { "progress" } } }
                tbody {
                    @for (g, counts) in &p.items_by_gate {
                        tr data-gate=(g) {
                            td { (g) @if *g == p.gate { " (current)" } }
                            @for s in ITEM_STATUSES { td { (counts.get(s).copied().unwrap_or(0)) } }
                            td { (bar(counts)) span.summary { (summary(counts)) } }
                        }
                    }
                }
            }
            @if !failed.is_empty() {
                h2 { "Failed items" }
                (item_table(failed, viewer))
            }
            @if !retrying.is_empty() {
                h2 #retrying { "Waiting to retry" }
                (item_table(retrying, viewer))
            }
            h2 #items { "Items" }
            form.filters #item-search method="get" action=(base) {
                label { "Status " select name="status" {
                    option value="" { "any" }
                    @for s in ITEM_STATUSES { option value=(s) selected[field(search, "status") == s] { (s) } }
                } }
                label { "Id starts with " input type="search" name="prefix" value=(field(search, "prefix")); }
                label title="a field of the item's JSON data: customer = \"acme\", address.city = Paris" {
                    "Data " input type="search" name="data" placeholder="customer = \"acme\"" value=(field(search, "data"));
                }
                button type="submit" { "Search" }
            }
            (item_table(&items.data, viewer))
            @if searched && items.next.is_some() {
                p.muted { "A data search reads at most " (crate::store::listing::SEARCH_SPAN) " items a page; the next page goes on from where this one stopped." }
            }
            @if let Some(next) = &items.next { a.next href={ (base) "?" (query) "after=" (enc(next)) } { "Next page →" } }
        }
    }
}

/// The form that sets a partition's priority.
fn priority_form(viewer: &Viewer, path: &str, priority: i32) -> Markup {
    html! {
        @if let Viewer::Admin(csrf) = viewer {
            form.action method="post" action=(path) {
                input type="hidden" name="csrf" value=(csrf);
                input type="number" name="priority" value=(priority) min="-1000" max="1000" aria-label="priority";
                button type="submit" name="do" value="Set priority" { "Set priority" }
            }
        }
    }
}

fn item_table(items: &[ItemView], viewer: &Viewer) -> Markup {
    html! {
        table.items {
            thead { tr { th { "item" } th { "gate" } th { "status" } th { "attempts" } th title="not sent before (UTC)" { "not before" } th { "last error" } th { "data" } th {} } }
            tbody {
                @for i in items {
                    tr.item data-id=(i.id) data-status=(i.status) {
                        td { code { (text(&i.id)) } @if let Some(p) = &i.parent_id { br; small.parent { "spawned by " code { (text(p)) } } } } td { (i.gate) } td.status { (i.status) } td { (i.attempts) }
                        td.not-before { @if let (Some(t), "available") = (i.not_before, i.status.as_str()) { (time(t)) } }
                        td.error { (cut(i.last_error.as_deref().unwrap_or(""), ERROR_CHARS)) }
                        td.data { code { (cut(&i.data_preview, DATA_CHARS)) } @if i.data_bytes as usize > i.data_preview.len() { "…" } }
                        td { @if i.status == "failed" { (action(viewer, &format!("/items/{}/retry?partition={}", enc(&i.id), enc(&i.partition_id)), "Retry", None)) } }
                    }
                }
            }
        }
    }
}

/// When a partition's available items are done at its recent rate.
fn eta(p: &PartitionView) -> String {
    match (
        p.eta_ms,
        p.items_by_status.get("available").copied().unwrap_or(0),
    ) {
        (Some(ms), _) => duration(ms),
        (None, 0) => "nothing left".into(),
        (None, _) => "unknown (no recent rate)".into(),
    }
}
