//! Leasing and balancing partitions across live sessions.
//!
//! Each acquire cycle a processor learns which partitions it still holds
//! (and which of them a gate check would act on), then aims for its share
//! of the P active partitions among S live sessions: ceil(P/S) when no
//! session is capped, else the level that covers P once capped sessions
//! hold only up to their `--max-partitions`. It takes
//! free partitions first (those with work first), else one stolen per cycle from
//! the most-loaded session when that one is above target or holds at least
//! two more than this processor. (Ceil targets alone can leave one processor
//! short: with 61 partitions and 3 sessions, 21 + 21 + 19 satisfies "no one
//! above 21"; the second rule evens it to 21 + 20 + 20, i.e. everyone holds
//! floor(P/S) or ceil(P/S), and since a thief never ends above its victim,
//! partitions do not ping-pong.) Every change of owner is an OCC write, so
//! two processors can never both believe they won the same lease. The number
//! of statements per cycle does not grow with the partitions held. A capped
//! processor at its cap gives back idle partitions while others with work
//! wait unleased.

use std::collections::{HashMap, HashSet};

use rand::seq::{IndexedRandom, SliceRandom};

use crate::metrics::Metrics;
use crate::store::{LeaseCounts, Store};
use crate::{Config, Result};

/// What this processor holds, as the dispatch loop tracks it.
#[derive(Debug, Default)]
pub struct Held {
    /// Partition id → version as last seen.
    pub versions: HashMap<String, i64>,
    /// Partitions whose gate must be checked (new, changed, written to, or
    /// found stuck by the acquire cycle).
    pub dirty: HashSet<String>,
}

/// What an acquire cycle works with: the store, the counters it sets and
/// the settings it reads (the session expiry and `--max-partitions`).
pub struct Leasing<'a> {
    store: &'a Store,
    metrics: &'a Metrics,
    config: &'a Config,
}

impl<'a> Leasing<'a> {
    /// Borrows what an acquire cycle needs.
    pub fn new(store: &'a Store, metrics: &'a Metrics, config: &'a Config) -> Self {
        Self {
            store,
            metrics,
            config,
        }
    }
}

/// One acquire cycle for session `me`; `busy` are the partitions with
/// items in flight or buffered here.
pub async fn balance(
    leasing: &Leasing<'_>,
    me: &str,
    held: &mut Held,
    busy: &HashSet<String>,
) -> Result<()> {
    let store = leasing.store;
    let cfg = leasing.config;
    let expiry = cfg.session_expiry;
    let reaped = store.reap_sessions(expiry).await?;
    if reaped > 0 {
        tracing::info!(sessions = reaped, "deleted dead sessions");
    }

    let rows = store.held_partitions(me).await?;
    let now: HashMap<String, i64> = rows.iter().map(|r| (r.id.clone(), r.version)).collect();
    for id in held.versions.keys() {
        if !now.contains_key(id) {
            tracing::info!(partition = %id, "lost partition (taken by another processor, released or closed by someone else)");
            leasing.metrics.leases_lost.inc();
            held.dirty.remove(id);
        }
    }
    // Level-triggered fan-in: whatever happened (a result written by a
    // former owner, an item deleted or completed by hand), a held partition
    // that a gate check would act on is checked again.
    for r in &rows {
        let changed = held.versions.get(&r.id) != Some(&r.version);
        if changed || (r.stuck && !busy.contains(&r.id)) {
            held.dirty.insert(r.id.clone());
        }
    }
    held.versions = now;

    let counts = store.lease_counts(me, expiry).await?;
    leasing.metrics.sessions_alive.set(counts.sessions);
    leasing.metrics.backlog.set(counts.backlog);
    if counts.stranded > 0 {
        let n = store.reopen_stranded().await?;
        tracing::info!(
            partitions = n,
            "reopened complete partitions that had available items (added with plain SQL)"
        );
    }
    let caps = if counts.capped > 0 {
        store.session_caps(expiry).await?
    } else {
        vec![]
    };
    let cap = cfg.max_partitions.map(|c| c as i64);
    let mut want = target(&counts, &caps, cap) - counts.mine;

    // At the cap, make room: give back partitions with nothing to do while
    // partitions with work wait unleased.
    if let Some(cap) = cap
        && counts.mine >= cap
        && counts.free_ready > 0
    {
        let idle = rows
            .iter()
            .filter(|r| !r.ready && !r.stuck && !busy.contains(&r.id));
        for r in idle.take(counts.free_ready as usize) {
            if store.release(&r.id, r.version, me).await? {
                tracing::info!(partition = %r.id, "released an idle partition to make room for one with work");
                held.versions.remove(&r.id);
                held.dirty.remove(&r.id);
                want += 1;
            }
        }
    }
    if want > 0 {
        let mut free = store
            .free_partitions(expiry, (want as usize) * 2 + 8)
            .await?;
        // Those with work first (the query orders them so), at random within.
        free.shuffle(&mut rand::rng());
        free.sort_by_key(|f| !f.ready);
        for f in free {
            if want == 0 {
                break;
            }
            if store.lease(&f.id, f.version, me).await? {
                tracing::info!(partition = %f.id, "leased partition");
                held.versions.insert(f.id.clone(), f.version + 1);
                held.dirty.insert(f.id);
                want -= 1;
            }
        }
    }
    if want > 0 {
        steal_one(leasing, me, held.versions.len() as i64, held).await?;
    }
    leasing
        .metrics
        .partitions_held
        .set(held.versions.len() as i64);
    Ok(())
}

/// This session's share of the active partitions: the smallest level `t`
/// such that every live session holding up to `t` (capped ones up to their
/// cap) covers them all, so uncapped sessions take up what capped ones
/// cannot; then this session's own cap.
fn target(counts: &LeaseCounts, caps: &[i64], cap: Option<i64>) -> i64 {
    let sessions = counts.sessions.max(1);
    let uncapped = (sessions - caps.len() as i64).max(0);
    let covered = |t: i64| caps.iter().map(|c| (*c).min(t)).sum::<i64>() + uncapped * t;
    let t = if uncapped == 0 {
        counts.active
    } else {
        let (mut lo, mut hi) = (0, counts.active.max(0));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if covered(mid) >= counts.active {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    cap.map_or(t, |c| t.min(c))
}
/// Steals one partition from the most-loaded live session if it holds at
/// least two more than this processor's `mine` (below target, so this also
/// covers every session above target).
///
/// The partition is picked at random among the victim's. Not the most
/// recently updated one: a partition's `updated_at` moves when its gate
/// advances, so that pick is nearly always the one whose fresh items are in
/// flight, and every steal turned into rejected results and redeliveries
/// (the chaos test measured 35–55 duplicate deliveries per 1,000 steps that
/// way, 5–11 with a random pick).
async fn steal_one(leasing: &Leasing<'_>, me: &str, mine: i64, held: &mut Held) -> Result<()> {
    let store = leasing.store;
    let Some((owner, n)) = store.most_loaded(leasing.config.session_expiry).await? else {
        return Ok(());
    };
    if owner == me || n < mine + 2 {
        return Ok(());
    }
    let pick = store
        .partitions_of(&owner)
        .await?
        .choose(&mut rand::rng())
        .cloned();
    if let Some((id, version)) = pick
        && store.lease(&id, version, me).await?
    {
        tracing::info!(partition = %id, from = %owner, "stole partition to balance load");
        leasing.metrics.steals.inc();
        held.versions.insert(id.clone(), version + 1);
        held.dirty.insert(id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(sessions: i64, active: i64) -> LeaseCounts {
        LeaseCounts {
            sessions,
            capped: 0,
            active,
            mine: 0,
            free_ready: 0,
            backlog: 0,
            stranded: 0,
        }
    }

    #[test]
    fn targets() {
        // No caps: ceil(P/S).
        assert_eq!(target(&counts(3, 61), &[], None), 21);
        assert_eq!(target(&counts(2, 10), &[], None), 5);
        // One processor capped at 2: the other takes the remaining 8.
        assert_eq!(target(&counts(2, 10), &[2], None), 8);
        assert_eq!(target(&counts(2, 10), &[2], Some(2)), 2);
        // Everyone capped: take up to the cap.
        assert_eq!(target(&counts(2, 10), &[2, 3], Some(3)), 3);
        assert_eq!(target(&counts(1, 0), &[], None), 0);
    }
}
