//! The SQL tests of a partition's items that the acquire cycle and gate
//! checks share: each a few probes of the ready index that read at most
//! one entry, so they cost the same for a partition of ten items as for
//! one of a million.

use super::driver::{Driver, NOW_BOUND, Sql};

/// Opens a list of the live sessions' ids: the expiry in milliseconds
/// and `)` follow.
pub(super) const LIVE: &str = "(SELECT id FROM feed_processors WHERE heartbeat_at >= {now} - ";
use crate::ids::SessionId;
use crate::status::Status;

/// The first item available at the gate of a partition aliased `p` (and
/// matching `also`) in `order`, as a scalar subquery: NULL when there is
/// none. The orders read the ready index backwards where they can, from
/// the items not yet dispatched: forwards, on MySQL/MariaDB, a probe first
/// walked past the entries that completed items leave delete-marked until
/// purge removes them (on 100 partitions mid-drain, 1,500 index entries
/// each, twice per partition).
pub(super) fn first_at_gate(d: Driver, also: &str, order: &str) -> String {
    let (seq, index) = (d.dialect().seq, d.dialect().ready_index);
    format!(
        "(SELECT r.{seq} FROM feed_items r{index} WHERE r.partition_id = p.id \
         AND r.status = 'available' AND r.gate = p.gate{also} ORDER BY {order} LIMIT 1)"
    )
}

/// Any item available at the gate of a partition aliased `p`: the last
/// entry of the gate's range (the one scheduled latest, or the newest
/// without a time).
pub(super) fn any_at_gate(d: Driver) -> String {
    let seq = d.dialect().seq;
    first_at_gate(d, "", &format!("r.not_before DESC, r.{seq} DESC"))
}

/// A test, for a partition aliased `p`, that it has an item ready to run
/// now: not paused, and an item available at its gate without a time, or
/// one whose time has come. Two ranges of the ready index, each read for
/// one entry: items scheduled for later are never read.
pub(super) fn ready(d: Driver) -> String {
    let unscheduled = first_at_gate(
        d,
        " AND r.not_before IS NULL",
        &d.unscheduled_order("r", true),
    );
    let due = first_at_gate(
        d,
        &format!(" AND r.not_before <= {NOW_BOUND}"),
        "r.not_before",
    );
    format!("NOT p.paused AND ({unscheduled} IS NOT NULL OR {due} IS NOT NULL)")
}

/// A test, for a partition aliased `p`, that a gate check would act on it:
/// nothing is available at its gate, and an item is available below it,
/// or a failed item blocks it, or work waits at a later gate, or nothing is
/// left and it closes by itself. It mirrors the gate decision so that idle
/// partitions cost nothing to re-derive.
pub(super) fn stuck(d: Driver) -> String {
    let item = |cond: &str| item_exists(d, cond, "p.id");
    format!(
        "{} IS NULL AND ({} OR (p.on_failure <> 'continue' AND {}) \
         OR (NOT p.manual_checkpoint AND {}) OR (p.auto_close AND NOT {}))",
        any_at_gate(d),
        item("i.status = 'available' AND i.gate < p.gate"),
        item("i.status = 'failed'"),
        item("i.status = 'available' AND i.gate > p.gate"),
        item("i.status = 'available'"),
    )
}

/// The statuses Feed writes, in text order: any other status lies in one
/// of the open ranges between them, so "an unknown status" is five range
/// probes on the index rather than a scan of the partition's items.
const KNOWN: [&str; 4] = [
    Status::TEXT_ORDER[0].as_str(),
    Status::TEXT_ORDER[1].as_str(),
    Status::TEXT_ORDER[2].as_str(),
    Status::TEXT_ORDER[3].as_str(),
];

/// SQL for an item of the partition whose id is `partition` matching `cond`
/// (the item aliased `i`), read through the ready index.
pub(super) fn item_exists(d: Driver, cond: &str, partition: &str) -> String {
    let index = d.dialect().ready_index;
    format!(
        "EXISTS (SELECT 1 FROM feed_items i{index} WHERE i.partition_id = {partition} AND {cond})"
    )
}

/// SQL for "an item of the partition whose id is `partition` is still
/// open" (neither `complete` nor `cancelled`): three range probes on the
/// item index, whatever the statuses in between.
pub(super) fn open_items(d: Driver, partition: &str) -> String {
    open_probes(d, partition).join(" OR ")
}

/// SQL for "no item of the partition whose id is `partition` is still
/// open": [`open_items`]'s probes, each negated. Citus routes an `UPDATE`
/// guarded so to the partition's worker, where it plans `NOT (… OR …)`
/// over every shard.
pub(super) fn no_open_items(d: Driver, partition: &str) -> String {
    open_probes(d, partition)
        .iter()
        .map(|p| format!("NOT {p}"))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The three probes of [`open_items`].
fn open_probes(d: Driver, partition: &str) -> Vec<String> {
    let [_, cancelled, complete, _] = KNOWN;
    [
        format!("i.status < '{cancelled}'"),
        format!("i.status > '{cancelled}' AND i.status < '{complete}'"),
        format!("i.status > '{complete}'"),
    ]
    .iter()
    .map(|c| item_exists(d, c, partition))
    .collect()
}

/// Appends the probe's `verdict` column for a partition aliased `p` held
/// by `me`, whose id the probes read as `partition` (`p.id`, or its
/// value: see [`Store::one_partition`]). The first test is whether any item is still open (neither
/// `complete` nor `cancelled`: three range probes), so a partition that is
/// done costs three probes, one with work ready at its gate five. A partition no longer
/// held (`lost`) is not probed; the ownership test sits here rather than in
/// the `WHERE` clause so that the planner can only find the rows by their
/// ids (with stale statistics PostgreSQL would otherwise read every held
/// partition through the owner index and filter the ids).
pub(super) fn verdict_column(s: &mut Sql, me: &SessionId, partition: &str) {
    let rest = verdict_rest(s.driver(), partition);
    s.push("CASE WHEN p.owner = ").bind(me).push(&rest);
}

/// [`verdict_column`] after the owner's value; `partition` is the
/// partition's id in SQL (`p.id`, or its value).
fn verdict_rest(d: Driver, partition: &str) -> String {
    let [available, _, _, failed] = KNOWN;
    let on_p = |cond: &str| item_exists(d, cond, partition);
    let mut unknown = vec![
        on_p(&format!("i.status < '{available}'")),
        on_p(&format!("i.status > '{failed}'")),
    ];
    for w in KNOWN.windows(2) {
        unknown.push(on_p(&format!(
            "i.status > '{}' AND i.status < '{}'",
            w[0], w[1]
        )));
    }
    format!(
        " AND p.status = 'available' THEN \
         CASE WHEN NOT ({open}) THEN 'done' \
         WHEN {waiting} THEN CASE WHEN NOT p.paused AND ({ready}) THEN 'waiting' ELSE 'idle' END \
         WHEN {below} OR {unknown} THEN 'unrunnable' \
         WHEN p.on_failure <> 'continue' AND {blocked} THEN 'blocked' \
         ELSE 'next' END ELSE 'lost' END AS verdict",
        open = open_items(d, partition),
        waiting = on_p("i.status = 'available' AND i.gate = p.gate"),
        ready = [
            "i.not_before IS NULL",
            &format!("i.not_before <= {NOW_BOUND}")
        ]
        .map(|c| on_p(&format!(
            "i.status = 'available' AND i.gate = p.gate AND {c}"
        )))
        .join(" OR "),
        below = on_p("i.status = 'available' AND i.gate < p.gate"),
        unknown = unknown.join(" OR "),
        blocked = on_p("i.status = 'failed'"),
    )
}
