//! The audit page: the bulk actions, newest first, with who did them
//! (the API's admin token, or a console login by a tag of its session).

use maud::{Markup, html};

use super::{text, time};
use crate::store::audit::AuditEntry;

/// How a confirmation question names a bulk action.
pub(crate) fn verb(action: &str) -> &'static str {
    match action {
        "retry" => "Retry the failed items of",
        "pause" => "Pause",
        "resume" => "Resume",
        _ => "Cancel",
    }
}

pub(crate) fn audit(entries: &[AuditEntry], done: &str) -> Markup {
    html! {
        @if !done.is_empty() { p.flash { (done) } }
        @if entries.is_empty() { p.muted #audit { "No bulk action yet." } } @else {
            table #audit {
                thead { tr { th { "when" } th { "who" } th { "action" } th { "filter" } th { "matched" } th { "changed" } } }
                tbody {
                    @for e in entries {
                        tr.entry data-id=(e.id) {
                            td { (time(e.at)) } td.actor { (text(&e.actor)) } td.action { (text(&e.action)) }
                            td.filter { (text(&e.filter)) } td.matched { (e.matched) } td.changed { (e.changed) }
                        }
                    }
                }
            }
        }
    }
}
