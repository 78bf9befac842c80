//! The tenants' limits page: the table, and the form that sets them.

use maud::{Markup, html};

use super::{Viewer, action, enc, text};
use crate::console::limits::{MAX_WEIGHT, shown_rate};
use crate::store::limits::Limit;

/// Tenants' limits, a form to set one's (logged in) and a button to clear each.
pub(crate) fn limits(list: &[Limit], viewer: &Viewer, done: &str) -> Markup {
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
                            td.tenant { (text(&l.tenant)) }
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
