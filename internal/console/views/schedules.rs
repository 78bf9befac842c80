//! The schedules page: each recurring partition's expression, next tick,
//! last partition (a link) and last error.

use maud::{Markup, html};

use super::{enc, text, time};
use crate::store::ScheduleRow;

/// The schedules, by name.
pub(crate) fn schedules(list: &[ScheduleRow]) -> Markup {
    html! {
        p.muted {
            "Recurring partitions: each tick creates the partition " code { "<name>-<tick time>" }
            " with the schedule's items, once, whichever processors run. Set them with "
            code { "processor schedules set" } " or " code { "PUT /api/v1/schedules/{name}" } "."
        }
        table.schedules {
            thead { tr { th { "name" } th { "cron" } th { "time zone" } th { "next tick" } th { "last partition" } th { "last error" } } }
            tbody {
                @for s in list {
                    tr.schedule data-name=(s.name) {
                        td.name { (text(&s.name)) }
                        td.cron { code { (text(&s.cron)) } }
                        td { (text(&s.timezone)) }
                        td.next { @if s.next_tick < i64::MAX { (time(s.next_tick)) } @else { "never" } }
                        td.last { @if let Some(p) = &s.last_partition { a href={ "/partitions/" (enc(p)) } { (text(p)) } } }
                        td.error { (text(s.last_error.as_deref().unwrap_or(""))) }
                    }
                }
            }
        }
        @if list.is_empty() { p.muted { "No schedule is set." } }
    }
}
