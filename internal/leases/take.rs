//! Taking partitions: free ones (with work first, or page by page when
//! many are wanted, then those of sessions that died holding them), one
//! stolen from the most-loaded session to even the shares out, and a
//! claim of new ones between cycles.

use rand::seq::{IndexedRandom, SliceRandom};

use super::Cycle;
use crate::Result;
use crate::context::Leasing;
use crate::ids::{PartitionId, SessionId};
use crate::store::LEASE_CHUNK;

/// A stolen partition is picked at random among this many of the victim's.
const STEAL_PICK: i64 = 1_000;

/// Takes up to `want` free partitions into `out.took` and returns how
/// many it took. A few are picked with work first, higher priorities first
/// (at random within, so processors racing for them spread out); many are leased page by page in
/// id order, [`LEASE_CHUNK`] per statement, so every statement stays
/// bounded.
pub(super) async fn take_free(
    ctx: &Leasing<'_>,
    me: &SessionId,
    out: &mut Cycle,
    want: usize,
) -> Result<usize> {
    let store = &ctx.store;
    let expiry = ctx.leases.session_expiry;
    if want <= LEASE_CHUNK {
        let mut free = store.free_partitions(expiry, want * 2 + 8).await?;
        free.shuffle(&mut rand::rng());
        free.sort_by_key(|f| (!f.ready, std::cmp::Reverse(f.priority)));
        let pick: Vec<(PartitionId, i64)> = free
            .into_iter()
            .take(want)
            .map(|f| (f.id, f.version))
            .collect();
        let leased = store.lease_many(&pick, me).await?;
        return Ok(took(out, leased));
    }
    let mut n = 0;
    while n < want {
        let page = LEASE_CHUNK.min(want - n);
        let leased = store.lease_page(&out.cursors.cursor, page, me).await?;
        if let Some(last) = leased.iter().map(|(id, _)| id).max() {
            out.cursors.cursor = last.clone();
        }
        let got = leased.len();
        n += took(out, leased);
        if got < page {
            break;
        }
    }
    // Nothing unowned is left: partitions of sessions that died holding
    // them, a page at a time.
    while n < want {
        let page = LEASE_CHUNK.min(want - n);
        let orphans = store.orphan_page(expiry, page).await?;
        let got = orphans.len();
        let leased = store.lease_many(&orphans, me).await?;
        let stop = got < page || leased.is_empty();
        n += took(out, leased);
        if stop {
            break;
        }
    }
    Ok(n)
}

/// Claims up to `want` unowned partitions (new work was written to
/// partitions nobody here holds): one statement that reads at most `want`
/// entries of the unowned range of `(status, owner, id)`, however many
/// partitions there are. Each row's owner is tested again as it is
/// written (rows another processor is leasing are passed over), so of
/// several processors claiming one new partition exactly one takes it.
pub(super) async fn claim(
    ctx: &Leasing<'_>,
    me: &SessionId,
    want: usize,
    out: &mut Cycle,
) -> Result<()> {
    if want > 0 {
        let leased = ctx.store.lease_page("", want, me).await?;
        took(out, leased);
    }
    Ok(())
}

/// Takes one free partition, picked at random among those with work
/// ready now (else among all: one whose gate must move on has work once
/// checked), for a processor that gave its partitions back to probe its
/// handler with.
pub(super) async fn take_one(ctx: &Leasing<'_>, me: &SessionId, out: &mut Cycle) -> Result<()> {
    let free = ctx
        .store
        .free_partitions(ctx.leases.session_expiry, 8)
        .await?;
    let any_ready = free.iter().any(|f| f.ready);
    let pick: Vec<(PartitionId, i64)> = free
        .into_iter()
        .filter(|f| f.ready || !any_ready)
        .map(|f| (f.id, f.version))
        .collect();
    let pick = pick.choose(&mut rand::rng()).cloned();
    if let Some(pick) = pick {
        let leased = ctx.store.lease_many(&[pick], me).await?;
        for (id, _) in &leased {
            tracing::info!(partition = %id, "leased a partition to probe the handler with");
        }
        out.took.extend(leased);
    }
    Ok(())
}

/// Adds partitions just leased to `out.took`; returns how many.
fn took(out: &mut Cycle, leased: Vec<(PartitionId, i64)>) -> usize {
    if !leased.is_empty() {
        tracing::info!(partitions = leased.len(), "leased partitions");
    }
    let n = leased.len();
    for (id, version) in leased {
        tracing::debug!(partition = %id, "leased partition");
        out.took.push((id, version));
    }
    n
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
pub(super) async fn steal_one(
    ctx: &Leasing<'_>,
    me: &SessionId,
    mine: i64,
    out: &mut Cycle,
) -> Result<()> {
    let store = &ctx.store;
    let Some((owner, n)) = store.most_loaded(ctx.leases.session_expiry).await? else {
        return Ok(());
    };
    if owner == *me || n < mine + 2 {
        return Ok(());
    }
    let pick = store
        .partitions_of(&owner, STEAL_PICK)
        .await?
        .choose(&mut rand::rng())
        .cloned();
    if let Some((id, version)) = pick
        && store.lease(&id, version, me).await?
    {
        tracing::info!(partition = %id, from = %owner, "stole partition to balance load");
        ctx.metrics.steals.inc();
        out.took.push((id, version + 1));
    }
    Ok(())
}
