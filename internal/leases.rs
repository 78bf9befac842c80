//! Leasing and balancing partitions across live sessions.
//!
//! Each acquire cycle a processor learns which partitions it still holds,
//! then aims for ceil(P/S) of the P active partitions among S live sessions:
//! free partitions first (owner NULL or dead), else one stolen per cycle from
//! the most-loaded session above target. Every change of owner is an OCC
//! write, so two processors can never both believe they won the same lease.
//! The number of statements per cycle does not grow with the partitions held.

use std::collections::{HashMap, HashSet};

use rand::seq::SliceRandom;

use crate::Result;
use crate::run::Shared;

/// What this processor holds, as the dispatch loop tracks it.
#[derive(Debug, Default)]
pub struct Held {
    /// Partition id → version as last seen.
    pub versions: HashMap<String, i64>,
    /// Partitions whose gate must be checked (new, changed, or written to).
    pub dirty: HashSet<String>,
}

/// One acquire cycle for session `me`.
pub async fn balance(shared: &Shared, me: &str, held: &mut Held) -> Result<()> {
    let store = &shared.store;
    let cfg = &shared.config;
    let expiry = cfg.session_expiry;
    let reaped = store.reap_sessions(expiry).await?;
    if reaped > 0 {
        tracing::info!(sessions = reaped, "deleted dead sessions");
    }

    let now: HashMap<String, i64> = store.held_partitions(me).await?.into_iter().collect();
    for id in held.versions.keys() {
        if !now.contains_key(id) {
            tracing::info!(partition = %id, "lost partition (taken by another processor, released or closed by someone else)");
            shared.metrics.leases_lost.inc();
            held.dirty.remove(id);
        }
    }
    for (id, v) in &now {
        if held.versions.get(id) != Some(v) {
            held.dirty.insert(id.clone());
        }
    }
    held.versions = now;

    let counts = store.lease_counts(me, expiry).await?;
    shared.metrics.sessions_alive.set(counts.sessions);
    let sessions = counts.sessions.max(1);
    let mut target = (counts.active + sessions - 1) / sessions;
    if let Some(cap) = cfg.max_partitions {
        target = target.min(cap as i64);
    }
    let mut want = target - counts.mine;
    if want > 0 {
        let mut free = store
            .free_partitions(expiry, (want as usize) * 2 + 8)
            .await?;
        free.shuffle(&mut rand::rng());
        for (id, version) in free {
            if want == 0 {
                break;
            }
            if store.lease(&id, version, me).await? {
                tracing::info!(partition = %id, "leased partition");
                held.versions.insert(id.clone(), version + 1);
                held.dirty.insert(id);
                want -= 1;
            }
        }
    }
    if want > 0 {
        steal_one(shared, me, target, held).await?;
    }
    shared
        .metrics
        .partitions_held
        .set(held.versions.len() as i64);
    Ok(())
}

/// Steals one partition from the most-loaded live session if it holds more
/// than the target.
async fn steal_one(shared: &Shared, me: &str, target: i64, held: &mut Held) -> Result<()> {
    let store = &shared.store;
    let Some((owner, n)) = store.most_loaded(shared.config.session_expiry).await? else {
        return Ok(());
    };
    if owner == me || n <= target {
        return Ok(());
    }
    if let Some((id, version)) = store.one_partition_of(&owner).await?
        && store.lease(&id, version, me).await?
    {
        tracing::info!(partition = %id, from = %owner, "stole partition to balance load");
        shared.metrics.steals.inc();
        held.versions.insert(id.clone(), version + 1);
        held.dirty.insert(id);
    }
    Ok(())
}
