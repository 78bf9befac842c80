//! The fleet's pages: the overview (counts, the completion chart) and the
//! live processors, with a banner for each whose dispatch holds off.

use maud::{Markup, html};

use super::{PARTITION_STATUSES, cut, text, time};
use crate::console::limits::shown_rate;
use crate::store::overview::Overview;
use crate::store::status::ProcessorStatus;

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
