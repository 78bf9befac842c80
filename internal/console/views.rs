//! The dashboard's markup (maud escapes every interpolated value, so item
//! data and errors always render as text). Only what can change lives in
//! `#live`, which the script re-fetches every few seconds.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, html};

use super::limits::{MAX_WEIGHT, shown_rate};
use crate::status::Status;
use crate::store::limits::Limit;
use crate::store::listing::{ItemView, Page, PartitionView};
use crate::store::overview::Overview;
use crate::store::status::ProcessorStatus;

/// Characters of item data shown in a table.
const DATA_CHARS: usize = 200;
/// Characters of `last_error` shown in a table.
const ERROR_CHARS: usize = 300;
/// Item statuses, in the order bars and tables show them (finished first).
pub const ITEM_STATUSES: [&str; 4] = [
    Status::Complete.as_str(),
    Status::Failed.as_str(),
    Status::Cancelled.as_str(),
    Status::Available.as_str(),
];
/// Partition statuses, for filters and counts.
pub const PARTITION_STATUSES: [&str; 4] = [
    Status::Available.as_str(),
    Status::Complete.as_str(),
    Status::Failed.as_str(),
    Status::Cancelled.as_str(),
];

/// What the viewer may do.
#[derive(Clone, Debug)]
pub enum Viewer {
    /// No admin token configured.
    ReadOnly,
    /// A token is configured; this browser has not logged in.
    LoggedOut,
    /// Logged in; forms carry this CSRF token.
    Admin(String),
}

/// Percent-encodes an id for a path segment.
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn cut(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

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

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// The page frame: navigation, login state and the refresh script.
pub fn layout(title: &str, viewer: &Viewer, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Feed" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/console.js" defer {}
            }
            body {
                nav {
                    strong { "Feed" }
                    a href="/" { "Overview" }
                    a href="/partitions" { "Partitions" }
                    a href="/processors" { "Processors" }
                    a href="/limits" { "Limits" }
                    span.who {
                        @match viewer {
                            Viewer::ReadOnly => "read-only",
                            Viewer::LoggedOut => a href="/login" { "Log in" },
                            Viewer::Admin(csrf) => form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Log out" }
                            },
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// A stacked bar of item counts by status.
pub fn bar(counts: &BTreeMap<String, i64>) -> Markup {
    let total: i64 = counts.values().sum::<i64>().max(1);
    let mut x = 0.0;
    let mut parts = Vec::new();
    for status in ITEM_STATUSES {
        let n = counts.get(status).copied().unwrap_or(0);
        if n > 0 {
            let w = 100.0 * n as f64 / total as f64;
            parts.push((status, x, w));
            x += w;
        }
    }
    html! {
        svg.bar viewBox="0 0 100 6" preserveAspectRatio="none" role="img" aria-label=(summary(counts)) {
            @for (status, x, w) in parts {
                rect class=(status) x=(format!("{x:.2}")) y="0" width=(format!("{w:.2}")) height="6" {}
            }
        }
    }
}

/// "12/40 complete, 1 failed".
pub fn summary(counts: &BTreeMap<String, i64>) -> String {
    let total: i64 = counts.values().sum();
    let n = |k: &str| counts.get(k).copied().unwrap_or(0);
    let mut s = format!("{}/{total} complete", n("complete"));
    for k in ["failed", "cancelled"] {
        if n(k) > 0 {
            s.push_str(&format!(", {} {k}", n(k)));
        }
    }
    s
}

fn status_badge(status: &str, paused: bool) -> Markup {
    html! {
        span class={ "badge " (status) } { (status) }
        @if paused { " " span.badge.paused { "paused" } }
    }
}

pub fn overview(o: &Overview) -> Markup {
    let peak = o
        .completed_per_minute
        .iter()
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0)
        .max(1);
    let start = o.now - 3_600_000;
    html! {
        section.cards {
            @for s in PARTITION_STATUSES {
                a.card href={ "/partitions?status=" (s) } {
                    span.count id={ "count-" (s) } { (o.partitions_by_status.get(s).copied().unwrap_or(0)) }
                    span { (s) }
                }
            }
            div.card { span.count id="count-paused" { (o.paused) } span { "paused" } }
            div.card { span.count id="count-processors" { (o.processors.len()) } span { "processors" } }
            div.card title="completion events waiting to be delivered to --events-url" {
                span.count id="count-events-pending" { (o.events_pending) } span { "events pending" }
            }
            div.card title="completion events whose delivery gave up; `processor events retry` sends them again" {
                span.count id="count-events-failed" { (o.events_failed) } span { "events failed" }
            }
        }
        h2 { "Items completed per minute, last hour" }
        svg.chart viewBox="0 0 600 100" preserveAspectRatio="none" role="img"
            aria-label={ (o.completed_per_minute.iter().map(|(_, n)| n).sum::<i64>()) " items completed in the last hour" } {
            @for (minute, n) in &o.completed_per_minute {
                @let x = ((minute - start).max(0) as f64 / 60_000.0 * 10.0).min(590.0);
                @let h = 100.0 * *n as f64 / peak as f64;
                rect x=(format!("{x:.1}")) y=(format!("{:.1}", 100.0 - h)) width="9" height=(format!("{h:.1}")) {
                    title { (n) " at " (time(*minute)) }
                }
            }
        }
        p.muted { "peak " (peak) " per minute" }
        h2 { "Processors" }
        (processors(&o.processors))
    }
}

/// A banner per processor whose dispatch holds off (the handler not
/// there, the circuit breaker open): why, and since when.
pub fn held_banner(list: &[ProcessorStatus]) -> Markup {
    html! {
        @for p in list {
            @if let (Some(why), Some(since)) = (&p.held_reason, p.held_since) {
                div.banner.held role="alert" data-id=(p.id) {
                    strong { "Dispatch holds off" }
                    " on processor " code { (cut(&p.id, 8)) } " since " (time(since))
                    " (no attempts are counted): " (why)
                }
            }
        }
    }
}

pub fn processors(list: &[ProcessorStatus]) -> Markup {
    html! {
        (held_banner(list))
        @if list.is_empty() { p.muted { "No live processors." } } @else {
            table {
                thead { tr { th { "session" } th { "host" } th { "pid" } th { "version" } th { "partitions held" } th { "heartbeat age" } th title="the rate it holds itself to after the handler answered 429 (too many requests)" { "send rate" } } }
                tbody {
                    @for p in list {
                        tr.processor data-id=(p.id) {
                            td { code { (p.id) } } td { (p.hostname) } td { (p.pid) }
                            td { (p.software_version) } td { (p.partitions) }
                            td { (format!("{:.1}s", p.heartbeat_age_ms as f64 / 1000.0)) }
                            td.send-rate { (send_rate(p.send_rate)) }
                        }
                    }
                }
            }
        }
    }
}

/// "300/s (after 429s)", or "-" when the processor is not held back.
fn send_rate(rate: Option<f64>) -> String {
    match rate {
        Some(r) => format!("{} (after 429s)", shown_rate(Some(r))),
        None => "-".into(),
    }
}

pub fn partitions(page: &Page<PartitionView>, status: &str, prefix: &str) -> Markup {
    html! {
        form.filters method="get" action="/partitions" {
            label { "Status " select name="status" {
                option value="" { "any" }
                @for s in PARTITION_STATUSES { option value=(s) selected[status == s] { (s) } }
            } }
            label { "Id starts with " input type="search" name="prefix" value=(prefix); }
            button type="submit" { "Filter" }
        }
        div #live {
            table {
                thead { tr { th { "partition" } th { "tenant" } th { "status" } th { "gate" } th { "owner" } th { "progress by gate" } th title="available items that wait for their scheduled time" { "scheduled" } } }
                tbody {
                    @for p in &page.data {
                        tr.partition data-id=(p.id) {
                            td { a href={ "/partitions/" (enc(&p.id)) } { (p.id) } }
                            td.tenant { (p.tenant.as_deref().unwrap_or("-")) }
                            td { (status_badge(&p.status, p.paused)) }
                            td { (p.gate) }
                            td { code { (p.owner.as_deref().map(|o| cut(o, 8)).unwrap_or_else(|| "-".into())) } }
                            td { @for (g, counts) in &p.items_by_gate {
                                div.gate { span { "gate " (g) } (bar(counts)) span.summary { (summary(counts)) } }
                            } }
                            td.scheduled { (scheduled(p)) }
                        }
                    }
                }
            }
            @if page.data.is_empty() { p.muted { "No partitions match." } }
            @if let Some(next) = &page.next {
                a.next href={ "/partitions?status=" (enc(status)) "&prefix=" (enc(prefix)) "&after=" (enc(next)) } { "Next page →" }
            }
        }
    }
}

/// An action button: a form that first asks for confirmation.
pub fn action(viewer: &Viewer, path: &str, label: &str, gate: Option<i64>) -> Markup {
    html! {
        @if let Viewer::Admin(csrf) = viewer {
            form.action method="post" action=(path) {
                input type="hidden" name="csrf" value=(csrf);
                @if let Some(g) = gate { input type="number" name="gate" value=(g) min="0" aria-label="gate"; }
                button type="submit" name="do" value=(label) { (label) }
            }
        }
    }
}

/// The item lists of a partition's page, and its owner's session.
pub struct Lists<'a> {
    /// Its failed items first.
    pub failed: &'a [ItemView],
    /// Its items waiting to retry after a failed attempt.
    pub retrying: &'a [ItemView],
    /// A page of all its items.
    pub items: &'a Page<ItemView>,
    /// The session that holds it (none when it is not held).
    pub owner: &'a [ProcessorStatus],
}

pub fn partition(p: &PartitionView, viewer: &Viewer, lists: Lists<'_>, done: &str) -> Markup {
    let base = format!("/partitions/{}", enc(&p.id));
    let Lists {
        failed,
        retrying,
        items,
        owner,
    } = lists;
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
                        Some(t) => a href="/limits" title="the tenants' limits" { (t) },
                        None => "-",
                    }
                }
                dt { "settings" } dd { "auto_close " (p.auto_close) ", manual_checkpoint " (p.manual_checkpoint) ", on_failure " (p.on_failure) }
                dt { "updated" } dd { (time(p.updated_at)) }
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
                        @if p.status != "complete" && p.status != "cancelled" { (action(viewer, &format!("{base}/cancel"), "Cancel", None)) }
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
            h2 { "Items" }
            (item_table(&items.data, viewer))
            @if let Some(next) = &items.next { a.next href={ (base) "?after=" (enc(next)) } { "Next page →" } }
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
                        td { code { (i.id) } } td { (i.gate) } td.status { (i.status) } td { (i.attempts) }
                        td.not-before { @if let (Some(t), "available") = (i.not_before, i.status.as_str()) { (time(t)) } }
                        td.error { (cut(i.last_error.as_deref().unwrap_or(""), ERROR_CHARS)) }
                        td.data { code { (cut(&i.data_preview, DATA_CHARS)) } @if i.data_bytes as usize > i.data_preview.len() { "…" } }
                        td { @if i.status == "failed" { (action(viewer, &format!("/items/{}/retry", enc(&i.id)), "Retry", None)) } }
                    }
                }
            }
        }
    }
}

/// Asks before acting; the form repeats the action, with its `fields`,
/// and `confirm=yes`.
pub fn confirm(
    question: &str,
    path: &str,
    csrf: &str,
    fields: &[(&str, String)],
    back: &str,
) -> Markup {
    html! {
        p.question { (question) }
        form.confirm method="post" action=(path) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="confirm" value="yes";
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button #confirm type="submit" { "Yes, do it" }
            " " a href=(back) { "No, go back" }
        }
    }
}

/// Tenants' limits, a form to set one's (logged in) and a button to clear each.
pub fn limits(list: &[Limit], viewer: &Viewer, done: &str) -> Markup {
    let or_dash = |v: Option<u32>| v.map_or_else(|| "-".into(), |n| n.to_string());
    html! {
        @if !done.is_empty() { p.flash { (done) } }
        p.muted {
            "Per-tenant flow control, shared by every processor: items of a tenant at the handler at once, "
            "items sent per second (and the burst after a quiet spell), and its share of dispatch against "
            "other tenants. Partitions name their tenant when enqueued (" code { "enqueue --tenant" } ")."
        }
        div #live {
            table.limits {
                thead { tr { th { "tenant" } th { "max in flight" } th { "rate" } th { "burst" } th { "weight" } th {} } }
                tbody {
                    @for l in list {
                        tr.limit data-tenant=(l.tenant) {
                            td.tenant { (l.tenant) }
                            td.max-in-flight { (or_dash(l.max_in_flight)) }
                            td.rate { (shown_rate(l.rate)) }
                            td.burst { (or_dash(l.burst)) }
                            td.weight { (l.weight.unwrap_or(1)) }
                            td { (action(viewer, &format!("/limits/{}/clear", enc(&l.tenant)), "Clear", None)) }
                        }
                    }
                }
            }
            @if list.is_empty() { p.muted { "No tenant has limits: only the processors' own flags apply." } }
        }
        h2 { "Set a tenant's limits" }
        @match viewer {
            Viewer::ReadOnly => p.muted { "Read-only: start the dashboard with --admin-token to change limits." },
            Viewer::LoggedOut => p.muted { a href={ "/login?next=" (enc("/limits")) } { "Log in" } " to change limits." },
            Viewer::Admin(csrf) => {
                form.limits method="post" action="/limits" {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "Tenant " input #limit-tenant type="text" name="tenant" required maxlength="255"; }
                    label { "Max in flight " input #limit-max-in-flight type="text" name="max_in_flight" inputmode="numeric" placeholder="e.g. 20"; }
                    label { "Rate " input #limit-rate type="text" name="rate" placeholder="e.g. 100/s, 30/m"; }
                    label { "Burst " input #limit-burst type="text" name="burst" inputmode="numeric" placeholder="e.g. 10"; }
                    label { "Weight " input #limit-weight type="text" name="weight" inputmode="numeric" placeholder={ "1 to " (MAX_WEIGHT) }; }
                    button #limit-set type="submit" name="do" value="Set limits" { "Set limits" }
                }
                p.muted {
                    "An empty field keeps the tenant's current value; " code { "none" } " removes it "
                    "(max in flight " code { "0" } " is no cap too). Weight 1 is an even share, 2 twice as many turns."
                }
            },
        }
    }
}

pub fn login(next: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.flash.bad { (e) } }
        form.login method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label { "Admin token " input #token type="password" name="token" autocomplete="current-password" required; }
            button #login type="submit" { "Log in" }
        }
    }
}

pub fn message(text: &str) -> Markup {
    html! { p.flash.bad { (text) } p { a href="/" { "Back to the overview" } } }
}
