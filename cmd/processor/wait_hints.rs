//! What `wait` says when a partition did not complete: why it is still
//! open (paused, held off, no processor, items waiting to retry or for
//! their time) or what to do about a failed one, from what the database
//! shows.

use feed::store::status::Status;
use feed::store::wait::Waited;

use crate::status::{clean, count, due_at};

/// One line per reason the database shows, each with what to run.
pub fn hints(partition: &str, w: &Waited, s: &Status) -> Vec<String> {
    let id = clean(partition);
    let mut out = Vec::new();
    if w.counts.failed > 0 {
        let reopens = if w.status == "failed" {
            " and reopens the partition"
        } else {
            ""
        };
        out.push(format!(
            "{} failed; `processor retry --partition {id}` tries again with fresh attempts{reopens}",
            count(w.counts.failed, "item")
        ));
    }
    if w.finished {
        return out;
    }
    let Some(p) = s.partitions.first() else {
        return out;
    };
    if p.paused {
        out.push(format!(
            "partition {id} is paused: `processor resume --partition {id}` dispatches it again"
        ));
    }
    if w.counts.available == 0 && w.counts.failed == 0 && !p.auto_close {
        out.push(format!(
            "every item of partition {id} is finished, but it does not close by itself \
             (enqueued with --no-auto-close): it waits for more items"
        ));
    }
    if s.processors.is_empty() {
        out.push("no live processor: nothing delivers the items (start `processor run`)".into());
    }
    for h in s.processors.iter().filter(|h| h.held_reason.is_some()) {
        out.push(format!(
            "processor {} holds dispatch off (no attempts counted): {}",
            clean(&h.id),
            clean(h.held_reason.as_deref().unwrap_or_default())
        ));
    }
    if let Some(first) = s.retrying_items.first() {
        out.push(format!(
            "{} waiting to retry after a failed attempt; the last error: {}",
            count(s.retrying_items.len() as i64, "item"),
            clean(first.last_error.as_deref().unwrap_or_default())
        ));
    }
    if let (Some(due), Some(due_in)) = (p.next_due, p.next_due_in_ms)
        && p.scheduled_items > 0
    {
        out.push(format!(
            "{} scheduled; the first comes due {}",
            count(p.scheduled_items, "item"),
            due_at(due, due_in)
        ));
    }
    out
}
