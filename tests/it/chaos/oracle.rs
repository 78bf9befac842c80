//! The chaos test's oracle: named checks over the database's final state
//! and the trace the handler recorded (every call, its answer's time and
//! the partition's owner when it was answered).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde_json::{Value as Json, json};

use super::world::{ITEMS, PARTITIONS, Rec, partitions};
use crate::support::{Backend, TestDb};

/// Item id → (partition, the gates of its steps).
pub type Plans = HashMap<String, (String, Vec<i64>)>;

/// Calls per (item, step), leaving out the held ones.
pub type ByStep<'a> = HashMap<(&'a str, i64), Vec<usize>>;

/// Whether the partition's owner was `who` when the call was answered.
pub fn owner_was(r: &Rec, who: &str) -> bool {
    r.owner.as_ref().ok().and_then(Option::as_deref) == Some(who)
}

/// Every partition complete and released; every item complete at gate 2
/// with its plan applied exactly once per step. Returns the stored data.
pub async fn final_state(db: &TestDb, plans: &Plans) -> HashMap<String, Json> {
    for (id, st, owner) in partitions(db).await {
        assert_eq!((st.as_str(), owner), ("complete", None), "partition {id}");
    }
    let data_col = if db.backend == Backend::Sqlite {
        "CAST(data AS BLOB)"
    } else {
        "data"
    };
    let rows = db
        .query(
            &format!("SELECT id, partition_id, status, gate, {data_col} AS data FROM feed_items"),
            vec![],
        )
        .await;
    assert_eq!(rows.len(), PARTITIONS * ITEMS);
    let mut stored: HashMap<String, Json> = HashMap::new();
    for r in &rows {
        let id: String = r.try_get("", "id").unwrap();
        let status: String = r.try_get("", "status").unwrap();
        let gate: i64 = r.try_get("", "gate").unwrap();
        let bytes: Vec<u8> = r.try_get("", "data").unwrap();
        let data: Json = serde_json::from_slice(&bytes).unwrap();
        let (_, gates) = &plans[&id];
        assert_eq!(
            (status.as_str(), gate),
            ("complete", 2),
            "item {id}: {data}"
        );
        assert_eq!(
            data["step"],
            json!(gates.len()),
            "item {id}: step counter: {data}"
        );
        let history = data["history"].as_array().unwrap();
        assert_eq!(history.len(), gates.len(), "item {id}: history: {data}");
        for (i, (e, g)) in history.iter().zip(gates).enumerate() {
            assert_eq!(
                (&e[0], &e[1]),
                (&json!(g), &json!(i)),
                "item {id}: step {i}: {data}"
            );
        }
        assert_eq!(data["by"], history.last().unwrap()[2], "item {id}: {data}");
        assert_eq!(data["plan"], json!(gates), "item {id}: {data}");
        stored.insert(id, data);
    }

    stored
}

/// The ledger agrees with the data: every call at the gate its step is
/// planned at, one idempotency key per step and none shared between steps.
pub fn one_key_per_step<'a>(recs: &'a [Rec], plans: &'a Plans) -> ByStep<'a> {
    let mut keys: HashMap<(&str, i64), HashSet<&str>> = HashMap::new();
    let mut by_step: HashMap<(&str, i64), Vec<usize>> = HashMap::new();
    for (n, r) in recs.iter().enumerate() {
        let c = &r.call;
        let (partition, gates) = plans
            .get(&c.item)
            .unwrap_or_else(|| panic!("call for an unknown item: {c:?}"));
        assert_eq!(&c.partition, partition, "call {c:?}");
        let planned = usize::try_from(r.step).ok().and_then(|s| gates.get(s));
        assert_eq!(
            planned,
            Some(&c.gate),
            "call at a gate its step is not planned at: {c:?}"
        );
        assert_eq!(
            c.data["history"].as_array().map(Vec::len),
            Some(r.step as usize),
            "call with inconsistent data: {c:?}"
        );
        keys.entry((&c.item, r.step))
            .or_default()
            .insert(&c.idempotency_key);
        if !r.hold {
            by_step.entry((&c.item, r.step)).or_default().push(n);
        }
    }
    let mut seen_keys: HashMap<&str, (&str, i64)> = HashMap::new();
    for ((item, step), ks) in &keys {
        assert_eq!(ks.len(), 1, "{item} step {step}: idempotency keys {ks:?}");
        let k = ks.iter().next().unwrap();
        if let Some(other) = seen_keys.insert(k, (item, *step)) {
            panic!(
                "idempotency key {k} used for {other:?} and {:?}",
                (item, step)
            );
        }
    }

    by_step
}

/// A call answered while its partition had no owner, whose processor
/// leased the partition again afterwards: a later answer to the same
/// processor found it the owner. The fenced write may land after that
/// re-lease (the item's version is still the one delivered), which is no
/// stale write.
fn leased_again(recs: &[Rec], r: &Rec) -> bool {
    matches!(r.owner, Ok(None))
        && recs.iter().any(|l| {
            l.call.partition == r.call.partition && l.end > r.end && owner_was(l, &r.call.processor)
        })
}

/// Fencing: every stored step comes from a call answered while its
/// processor owned the partition (or, without an owner, was leased again
/// by it). Returns when each step's accepted call
/// ended, and which calls were accepted.
pub fn fenced<'a>(
    recs: &[Rec],
    stored: &'a HashMap<String, Json>,
    by_step: &ByStep,
) -> (HashMap<(&'a str, i64), Instant>, HashSet<usize>) {
    // Fencing: every stored step comes from a call answered while its
    // processor owned the partition. `accepted` = the end of that call.
    let mut accepted: HashMap<(&str, i64), Instant> = HashMap::new();
    let mut accepted_calls: HashSet<usize> = HashSet::new();
    for (id, data) in stored {
        for (i, e) in data["history"].as_array().unwrap().iter().enumerate() {
            let who = e[2].as_str().unwrap();
            let calls = by_step
                .get(&(id.as_str(), i as i64))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let mine: Vec<usize> = calls
                .iter()
                .copied()
                .filter(|n| recs[*n].call.processor == who)
                .collect();
            assert!(
                !mine.is_empty(),
                "item {id} step {i} stored from {who}, which made no call for it: {:?}",
                calls.iter().map(|n| &recs[*n]).collect::<Vec<_>>()
            );
            let owned: Vec<usize> = mine
                .iter()
                .copied()
                .filter(|n| owner_was(&recs[*n], who) || leased_again(recs, &recs[*n]))
                .collect();
            assert!(
                !owned.is_empty(),
                "item {id} step {i} stored from {who}, but the partition's owner when it was answered was {:?} (a stale write)",
                mine.iter().map(|n| &recs[*n].owner).collect::<Vec<_>>()
            );
            let first = *owned.iter().min_by_key(|n| recs[**n].end).unwrap();
            accepted.insert((id.as_str(), i as i64), recs[first].end);
            accepted_calls.insert(first);
        }
    }

    (accepted, accepted_calls)
}

/// Gate order: every call at a gate above g started after the last
/// accepted answer at gate g. Returns the stale calls at a gate answered
/// after the partition had moved past it (counted, never stored).
pub fn gate_order(recs: &[Rec], plans: &Plans, accepted: &HashMap<(&str, i64), Instant>) -> usize {
    // Gate order per partition: every call at a gate above g started after
    // the last accepted answer at gate g.
    let mut last_accepted: HashMap<(&str, i64), Instant> = HashMap::new();
    for ((item, step), end) in accepted {
        let (partition, gates) = &plans[*item];
        let g = gates[*step as usize];
        let e = last_accepted.entry((partition.as_str(), g)).or_insert(*end);
        *e = (*e).max(*end);
    }
    let mut late_stale = 0;
    for r in recs {
        let c = &r.call;
        for g in 0..c.gate {
            if let Some(end) = last_accepted.get(&(c.partition.as_str(), g)) {
                assert!(
                    c.at > *end,
                    "partition {}: a call at gate {} ({}, step {}) started before the last accepted answer at gate {g}",
                    c.partition,
                    c.gate,
                    c.item,
                    r.step
                );
            }
        }
    }
    // Stale calls at gate g answered after the partition moved past g.
    let mut first_above: HashMap<(&str, i64), Instant> = HashMap::new();
    for r in recs {
        for g in 0..r.call.gate {
            let e = first_above
                .entry((r.call.partition.as_str(), g))
                .or_insert(r.call.at);
            *e = (*e).min(r.call.at);
        }
    }
    for r in recs.iter().filter(|r| !r.hold) {
        if let Some(t) = first_above.get(&(r.call.partition.as_str(), r.call.gate))
            && r.end > *t
        {
            late_stale += 1;
        }
    }

    late_stale
}
