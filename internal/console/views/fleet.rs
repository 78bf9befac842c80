//! The fleet's pages: the overview (counts, throughput now, the backlog,
//! the completion chart) and the live processors, with a banner for each
//! whose dispatch holds off.

use maud::{Markup, html};

use super::{PARTITION_STATUSES, cut, duration, text, time};
use crate::console::limits::shown_rate;
use crate::recent::{Fleet, Percentiles};
use crate::store::backlog::TenantBacklog;
use crate::store::overview::Overview;
use crate::store::status::ProcessorStatus;
use crate::store::throughput::{Rates, Throughput};

pub(crate) fn overview(o: &Overview) -> Markup {
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
        h2 { "Health" }
        (health(&o.fleet, o.primary))
        h2 { "Throughput now" }
        (throughput(&o.throughput))
        h2 { "Latency, last 5 minutes" }
        (latency(&o.fleet))
        h2 { "Backlog" }
        (backlog(&o.backlog))
        p.muted { "counted at most every 15 s" }
        h2 { "Items completed per minute, last hour" }
        (chart(&o.completed_per_minute, start, peak))
        h2 { "Processors" }
        (processors(&o.processors))
    }
}

/// The overview when the database cannot be reached: every figure says
/// "unknown" (none is shown as zero), and the database's line says why.
pub(crate) fn unknown(why: &str) -> Markup {
    html! {
        div.banner.held role="alert" #database-unreachable {
            strong { "The database cannot be reached" } ": " (text(why))
            " — every figure below is unknown until it answers again."
        }
        section.cards {
            @for s in PARTITION_STATUSES.iter().chain(&["paused", "processors", "events pending", "events failed"]) {
                div.card { span.count.unknown { "unknown" } span { (s) } }
            }
        }
        h2 { "Health" }
        table #health {
            tbody {
                tr { th { "handler" } td #handler-state data-state="unknown" { "unknown (the processors' figures are in the database)" } }
                tr { th { "database" } td #database-state { "unreachable: " (text(why)) } }
            }
        }
        @for section in ["Throughput now", "Latency, last 5 minutes", "Backlog", "Items completed per minute, last hour", "Processors"] {
            h2 { (section) }
            p.unknown { "unknown" }
        }
    }
}

/// A banner per processor whose dispatch holds off (the handler not
/// there, the circuit breaker open): why, and since when.
pub(crate) fn held_banner(list: &[ProcessorStatus]) -> Markup {
    html! {
        @for p in list {
            @if let (Some(why), Some(since)) = (&p.held_reason, p.held_since) {
                div.banner.held role="alert" data-id=(p.id) {
                    strong { "Dispatch holds off" }
                    " on processor " code { (cut(&p.id, 8)) } " since " (time(since))
                    " (no attempts are counted): " (text(why))
                }
            }
        }
    }
}

pub(crate) fn processors(list: &[ProcessorStatus]) -> Markup {
    html! {
        (held_banner(list))
        @if list.is_empty() { p.muted { "No live processors." } } @else {
            table {
                thead { tr { th { "session" } th { "host" } th { "pid" } th { "version" } th { "partitions held" } th { "in flight" } th title="handler calls per second over the last minute" { "calls/s" } th { "dispatch" } th { "heartbeat age" } th title="the rate it holds itself to after the handler answered 429 (too many requests)" { "send rate" } } }
                tbody {
                    @for p in list {
                        tr.processor data-id=(p.id) {
                            td { code { (p.id) } } td { (p.hostname) } td { (p.pid) }
                            td { (p.software_version) } td { (p.partitions) }
                            td.in-flight { (p.figures.as_ref().map_or("unknown".into(), |f| f.in_flight.to_string())) }
                            td.calls { (p.figures.as_ref().map_or("unknown".into(), |f| format!("{:.1}", f.calls_per_second))) }
                            td.hold { @if p.held_reason.is_some() { "held off" } @else { "dispatching" } }
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

/// The handler's state (as the fleet saw it over the last 5 minutes) and
/// the database's: reachable (this page came from it) and a primary.
fn health(f: &Fleet, primary: Option<bool>) -> Markup {
    let h = &f.handler;
    html! {
        table #health {
            tbody {
                tr { th { "handler" } td #handler-state data-state=(h.state) { strong { (h.state) } ": " (text(&h.reason)) } }
                tr { th { "handler calls" } td #handler-calls {
                    (format!("{:.1}/s", h.calls_per_second))
                    @if let Some(s) = h.failed_share { ", " (format!("{:.1} %", s * 100.0)) " failed (5 min)" }
                } }
                tr { th { "database" } td #database-state { "reachable, " (match primary {
                    Some(true) => "primary (takes writes)",
                    Some(false) => "read-only (a standby or a demoted primary)",
                    None => "role unknown",
                }) } }
            }
        }
    }
}

/// Queue wait and handler latency percentiles, fleet-wide, over the last
/// 5 minutes.
fn latency(f: &Fleet) -> Markup {
    let ms = |v: f64| {
        if v >= 1000.0 {
            format!("{:.2} s", v / 1000.0)
        } else {
            format!("{v:.0} ms")
        }
    };
    let row = |what: &str, id: &str, p: Option<Percentiles>| {
        html! {
            tr #(id) {
                th { (what) }
                @match p {
                    Some(p) => { td.p50 { (ms(p.p50_ms)) } td.p95 { (ms(p.p95_ms)) } td.p99 { (ms(p.p99_ms)) } td.count { (p.count) } }
                    None => { td colspan="4" .muted { "none in the last 5 minutes" } }
                }
            }
        }
    };
    html! {
        table #latency {
            thead { tr { th {} th { "p50" } th { "p95" } th { "p99" } th { "count" } } }
            tbody {
                (row("queue wait (ready to delivered)", "queue-wait", f.queue_wait))
                (row("handler call", "handler-latency", f.handler.latency))
            }
        }
    }
}

/// Results per second over the last 1, 5 and 15 minutes.
fn throughput(t: &Throughput) -> Markup {
    let per_second = |v: f64| format!("{v:.2}/s");
    let row = |w: &str, r: &Rates| {
        html! {
            tr { th { (w) } td.completed { (per_second(r.completed)) } td.retried { (per_second(r.retried)) } td.failed { (per_second(r.failed)) } }
        }
    };
    html! {
        table #throughput {
            thead { tr { th { "over the last" } th { "completed" } th title="attempts that failed and will be retried" { "retried" } th title="items failed for good" { "failed" } } }
            tbody {
                (row("1 minute", &t.last_1m)) (row("5 minutes", &t.last_5m)) (row("15 minutes", &t.last_15m))
            }
        }
    }
}

/// What waits, by tenant: ready now and how long the oldest has waited,
/// scheduled, retrying.
fn backlog(list: &[TenantBacklog]) -> Markup {
    html! {
        @if list.is_empty() { p.muted #backlog { "Nothing waits." } } @else {
            table #backlog {
                thead { tr { th { "tenant" } th title="available at their partition's gate, their time come (in flight included)" { "ready" } th title="since the oldest ready item became ready" { "oldest ready" } th title="waiting for a time their producer set" { "scheduled" } th title="waiting out a retry's backoff" { "retrying" } } }
                tbody {
                    @for t in list {
                        tr.tenant {
                            td { @match &t.tenant { Some(name) => (text(name)), None => span.muted { "no tenant" } } }
                            td.ready { (t.ready) }
                            td.oldest { (t.oldest_ready_ms.map_or("-".into(), duration)) }
                            td { (t.scheduled) } td { (t.retrying) }
                        }
                    }
                }
            }
        }
    }
}

/// The completion chart: one bar per minute of the last hour, with its
/// axes labelled (items per minute, minutes before now) and each bar's
/// value on hover.
fn chart(per_minute: &[(i64, i64)], start: i64, peak: i64) -> Markup {
    html! {
        svg.chart #completions viewBox="0 0 640 130" preserveAspectRatio="xMinYMin meet" role="img"
            aria-label={ (per_minute.iter().map(|(_, n)| n).sum::<i64>()) " items completed in the last hour" } {
            text.axis x="4" y="12" { (peak) " items/min" }
            text.axis x="4" y="104" { "0" }
            line.axis x1="40" y1="6" x2="40" y2="106" {}
            line.axis x1="40" y1="106" x2="640" y2="106" {}
            @for (x, label) in [(40, "60 min ago"), (340, "30 min ago"), (600, "now")] {
                text.axis x=(x) y="124" { (label) }
            }
            @for (minute, n) in per_minute {
                @let x = 40.0 + ((minute - start).max(0) as f64 / 60_000.0 * 10.0).min(590.0);
                @let h = 100.0 * *n as f64 / peak as f64;
                rect x=(format!("{x:.1}")) y=(format!("{:.1}", 106.0 - h)) width="9" height=(format!("{h:.1}")) {
                    title { (n) " items completed in the minute from " (time(*minute)) }
                }
            }
        }
    }
}
