//! Leases: counting, taking, releasing and stealing partitions, and
//! reopening partitions that a plain-SQL producer left stranded.

use std::time::Duration;

use sea_orm::FromQueryResult;

use super::driver::{LeasePage, Sql, sql};
use super::limits::nonneg;
use super::probes::{LIVE, item_exists, ready, stuck};
use super::returning::id_versions;
use super::{Store, get, ms};
use crate::ids::{PartitionId, SessionId, Tenant};
use crate::{Error, Result};

/// Counts that only steer decisions stop here, so that a cycle reads no
/// more rows however large the backlog: beyond it, a processor aims for
/// its share of this many partitions and takes more as they close.
pub(crate) const COUNT_CAP: i64 = 100_000;

/// `complete` partitions probed for stranded items per acquire cycle.
pub(crate) const STRANDED_SLICE: i64 = 1_000;

/// Session and partition counts for one balancing decision.
#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct LeaseCounts {
    /// Live sessions (heartbeat within the expiry).
    pub sessions: i64,
    /// Of those, sessions with a `--max-partitions` cap.
    pub capped: i64,
    /// Partitions with status `available`, up to [`COUNT_CAP`]: those this
    /// session holds (as it knows them) and the others, counted up to what
    /// the cap leaves.
    pub active: i64,
    /// Available items in the partitions this session holds, up to [`COUNT_CAP`].
    pub backlog: i64,
    /// Of the slice of `complete` partitions probed this cycle, those that
    /// have an available item (added by hand).
    pub stranded: i64,
    /// Partitions in that slice: fewer than [`STRANDED_SLICE`] means it
    /// was the last, and the sweep wraps.
    pub stranded_slice: i64,
    /// The last id of that slice; None when the slice was empty.
    pub stranded_end: Option<PartitionId>,
}

/// A partition this session holds, as one acquire cycle sees it.
#[derive(Clone, Debug)]
pub(crate) struct HeldRow {
    /// Partition id.
    pub id: PartitionId,
    /// OCC version; a change means someone else wrote the partition.
    pub version: i64,
    /// It has an item ready to run now.
    pub ready: bool,
    /// A gate check would act on it (advance, close, fail).
    pub stuck: bool,
    /// Its tenant.
    pub tenant: Option<Tenant>,
    /// Its share of dispatch, if set.
    pub weight: Option<u32>,
    /// Its own cap on items in flight, if set.
    pub max_in_flight: Option<u32>,
    /// Its priority among the partitions it shares turns with.
    pub priority: i32,
}

/// A partition nobody live holds.
#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct FreeRow {
    /// Partition id.
    pub id: PartitionId,
    /// OCC version to lease it with.
    pub version: i64,
    /// It has an item ready to run now.
    pub ready: bool,
    /// Its priority: among free partitions with work, higher ones first.
    pub priority: i32,
}

impl Store {
    /// Everything one balancing decision needs, in one statement, each
    /// part bounded: capped counts, and one slice of `complete` partitions
    /// (ids after `stranded_after`) probed for stranded items. The active
    /// partitions are the `held` ones plus the others, which are counted
    /// in the index ranges around this session's own, so a processor that
    /// holds many reads only as many more as the cap leaves. The backlog
    /// (a metric only, and the costliest count) is counted only when
    /// `backlog` is set; otherwise it reads 0.
    pub(crate) async fn lease_counts(
        &self,
        me: &SessionId,
        held: i64,
        expiry: Duration,
        stranded_after: &str,
        backlog: bool,
    ) -> Result<LeaseCounts> {
        let e = ms(expiry);
        // The slice of `complete` partitions, found by its last id (as
        // `held_slice`'s), then probed. Every id-ordered
        // slice here reads `feed_partitions_held` in its key's order: the
        // driver's order for the unowned ones (PostgreSQL, ordered by less
        // than the whole key with statistics from before a drain, read
        // every complete partition through the status index and sorted
        // them: 0.36 s per slice at 300,000; MariaDB, ordered by the whole
        // key, sorted them all).
        let unowned_order = self.driver.dialect().unowned_order;
        let index = self.driver.dialect().ready_index;
        let stranded = item_exists(*self.driver, "i.status = 'available'", "x.id");
        let left = (COUNT_CAP - held).max(0);
        // Active partitions others hold or nobody does, counted along the
        // index in `order`, at most `left`.
        let others = |s: &mut Sql, cond: &str, owner: Option<&SessionId>, order: &str| {
            s.push(
                " + (SELECT COUNT(*) FROM (SELECT 1 AS x FROM feed_partitions WHERE status = 'available' AND ",
            )
            .push(cond);
            if let Some(owner) = owner {
                s.bind(owner);
            }
            sql!(into s; " ORDER BY " [order] " LIMIT " {left} ") o)");
        };
        let key = "status, owner, id";
        let mut s = Sql::new(self.driver);
        sql!(into s;
            "SELECT \
             (SELECT COUNT(*) FROM feed_processors WHERE heartbeat_at >= {now} - " {e} ") AS sessions, \
             (SELECT COUNT(*) FROM feed_processors WHERE heartbeat_at >= {now} - " {e}
            " AND max_partitions IS NOT NULL) AS capped, " {held}
        );
        others(&mut s, "owner IS NULL", None, unowned_order);
        others(&mut s, "owner < ", Some(me), key);
        others(&mut s, "owner > ", Some(me), key);
        sql!(into s;
            " AS active, \
             (SELECT COUNT(*) FROM (SELECT 1 AS x FROM feed_partitions p JOIN feed_items i" [index]
            " ON i.partition_id = p.id WHERE p.owner = " {me}
            " AND p.status = 'available' AND i.status = 'available' LIMIT "
            {if backlog { COUNT_CAP } else { 0 }} ") b) AS backlog, \
             c.stranded, c.stranded_slice, c.stranded_end \
             FROM (SELECT COUNT(CASE WHEN " [&stranded] " THEN 1 END) AS stranded, \
              COUNT(*) AS stranded_slice, MAX(x.id) AS stranded_end FROM feed_partitions x \
             WHERE x.status = 'complete' AND x.owner IS NULL AND x.id > " {stranded_after}
            " AND x.id <= (SELECT MAX(y.id) FROM (SELECT id FROM feed_partitions \
             WHERE status = 'complete' AND owner IS NULL AND id > " {stranded_after}
            " ORDER BY " [unowned_order] " LIMIT " {STRANDED_SLICE} ") y)) c"
        );
        let rows = self.fetch(s.statement()).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::NotFound("lease counts".into()))?;
        let mut counts = LeaseCounts::from_query_result(row, "")?;
        counts.active = counts.active.min(COUNT_CAP);
        Ok(counts)
    }

    /// Active partitions nobody live holds that have work ready now, up to
    /// `limit`: asked only by a processor at its `--max-partitions` cap.
    pub(crate) async fn free_ready(&self, expiry: Duration, limit: i64) -> Result<i64> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT COUNT(*) AS n FROM (SELECT 1 AS x FROM feed_partitions p \
                 WHERE p.status = 'available' AND (p.owner IS NULL OR p.owner NOT IN " [LIVE]
                {ms(expiry)} ")) AND " [&ready(*self.driver)] " LIMIT " {limit} ") f"
            ))
            .await?;
        rows.first().map_or(Ok(0), |r| get(r, "n"))
    }

    /// The caps of the live sessions that have one.
    pub(crate) async fn session_caps(&self, expiry: Duration) -> Result<Vec<i64>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT max_partitions FROM feed_processors \
                     WHERE heartbeat_at >= {now} - " {ms(expiry)} " AND max_partitions IS NOT NULL"
            ))
            .await?;
        rows.iter().map(|r| get(r, "max_partitions")).collect()
    }

    /// Up to `limit` active partitions whose owner is NULL or not a live
    /// session, those with work ready first, higher priorities first.
    pub(crate) async fn free_partitions(
        &self,
        expiry: Duration,
        limit: usize,
    ) -> Result<Vec<FreeRow>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT p.id, p.version, CASE WHEN " [&ready(*self.driver)] " THEN TRUE ELSE FALSE END AS ready, \
                 p.priority FROM feed_partitions p WHERE p.status = 'available' AND \
                 (p.owner IS NULL OR p.owner NOT IN " [LIVE] {ms(expiry)} ")) ORDER BY ready DESC, p.priority DESC LIMIT "
                {limit as i64}
            ))
            .await?;
        rows.iter()
            .map(|r| Ok(FreeRow::from_query_result(r, "")?))
            .collect()
    }

    /// Leases up to `limit` active partitions that nobody holds with ids
    /// after `after`, in id order: a page of a large backlog, one range of
    /// the `(status, owner, id)` index however many partitions are held or
    /// finished. Where an `UPDATE` can say which rows it changed, the page
    /// is picked and taken in one statement (rows another transaction is
    /// changing are passed over, and each row's owner is tested again as it
    /// is written, so two processors never both take one); elsewhere it is
    /// read, then leased by OCC as [`Store::lease_many`]. Returns the ids
    /// taken with their new versions.
    pub(crate) async fn lease_page(
        &self,
        after: &str,
        limit: usize,
        me: &SessionId,
    ) -> Result<Vec<(PartitionId, i64)>> {
        match self.driver.lease_page(after, limit, me) {
            LeasePage::Take(st) => id_versions(&self.fetch(st).await?),
            LeasePage::Pick(st) => {
                let pick = id_versions(&self.fetch(st).await?)?;
                self.lease_many(&pick, me).await
            }
        }
    }

    /// Up to `limit` active partitions whose owner is a session no longer
    /// live (it died holding them), by owner and id. Asked only once no
    /// partition is left unowned, it reads the held partitions' range of
    /// the `(status, owner, id)` index up to the dead owners' ones.
    pub(crate) async fn orphan_page(
        &self,
        expiry: Duration,
        limit: usize,
    ) -> Result<Vec<(PartitionId, i64)>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT p.id, p.version FROM feed_partitions p WHERE p.status = 'available' \
                 AND p.owner IS NOT NULL AND p.owner NOT IN " [LIVE] {ms(expiry)} ") \
                 ORDER BY p.status, p.owner, p.id LIMIT " {limit as i64}
            ))
            .await?;
        id_versions(&rows)
    }

    /// Takes a partition by OCC: succeeds only if nobody changed it since it was read.
    pub(crate) async fn lease(&self, id: &str, version: i64, me: &SessionId) -> Result<bool> {
        let n = self.run(sql!(self.driver;
            "UPDATE feed_partitions SET owner = " {me} ", version = version + 1, updated_at = {now} \
                 WHERE id = " {id} " AND version = " {version} " AND status = 'available'"
        ))
            .await?;
        Ok(n == 1)
    }

    /// Takes many partitions at once, each only at the version it was read
    /// at (OCC per row, as [`Store::lease`]), in chunks of at most
    /// [`super::LEASE_CHUNK`]; returns the ids taken with their new versions.
    pub(crate) async fn lease_many(
        &self,
        rows: &[(PartitionId, i64)],
        me: &SessionId,
    ) -> Result<Vec<(PartitionId, i64)>> {
        let mut taken = Vec::new();
        for chunk in rows.chunks(super::LEASE_CHUNK) {
            let rows = self.returning(self.driver.lease_chunk(chunk, me)).await?;
            taken.extend(id_versions(&rows)?);
        }
        Ok(taken)
    }

    /// Gives one held partition back (OCC, owner-fenced), to make room.
    pub(crate) async fn release(&self, id: &str, version: i64, me: &SessionId) -> Result<bool> {
        let n = self.run(sql!(self.driver;
            "UPDATE feed_partitions SET owner = NULL, version = version + 1, updated_at = {now} \
                 WHERE id = " {id} " AND version = " {version} " AND owner = " {me}
        ))
            .await?;
        Ok(n == 1)
    }

    /// One slice of the level-triggered view: up to `limit` held
    /// partitions with ids after `after`, in id order, each with whether it
    /// has work ready and whether a gate check would act on it. The probes
    /// run only on the slice, so a cycle costs the same however many
    /// partitions are held: a subquery finds the slice's last id first,
    /// and the probes read the rows up to it (on Citus each worker probes
    /// its own partitions' items).
    pub(crate) async fn held_slice(
        &self,
        me: &SessionId,
        after: &str,
        limit: usize,
    ) -> Result<Vec<HeldRow>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT p.id, p.version, CASE WHEN " [&ready(*self.driver)]
                " THEN TRUE ELSE FALSE END AS ready, CASE WHEN " [&stuck(*self.driver)]
                " THEN TRUE ELSE FALSE END AS stuck, p.tenant, p.weight, p.max_in_flight, p.priority \
                 FROM feed_partitions p WHERE p.owner = " {me} " AND p.status = 'available' \
                 AND p.id > " {after} " AND p.id <= (SELECT MAX(x.id) FROM (SELECT id FROM feed_partitions \
                 WHERE owner = " {me} " AND status = 'available' AND id > " {after}
                " ORDER BY status, owner, id LIMIT " {limit as i64} ") x) ORDER BY p.id"
            ))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(HeldRow {
                    id: get(r, "id")?,
                    version: get(r, "version")?,
                    ready: get(r, "ready")?,
                    stuck: get(r, "stuck")?,
                    tenant: get(r, "tenant")?,
                    weight: nonneg(get(r, "weight")?),
                    max_in_flight: nonneg(get(r, "max_in_flight")?),
                    priority: get(r, "priority")?,
                })
            })
            .collect()
    }

    /// Up to `limit` active partitions owned by `owner`, with their versions.
    pub(crate) async fn partitions_of(
        &self,
        owner: &SessionId,
        limit: i64,
    ) -> Result<Vec<(PartitionId, i64)>> {
        let rows = self.fetch(sql!(self.driver;
            "SELECT id, version FROM feed_partitions WHERE owner = " {owner} " AND status = 'available' \
                 ORDER BY status, owner, id LIMIT " {limit}
        ))
            .await?;
        id_versions(&rows)
    }

    /// The live session holding the most active partitions, with its count.
    pub(crate) async fn most_loaded(&self, expiry: Duration) -> Result<Option<(SessionId, i64)>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT p.owner AS owner, COUNT(*) AS n FROM feed_partitions p \
                     JOIN feed_processors s ON s.id = p.owner \
                     WHERE p.status = 'available' AND s.heartbeat_at >= {now} - " {ms(expiry)} " \
                     GROUP BY p.owner ORDER BY n DESC LIMIT 1"
            ))
            .await?;
        rows.first()
            .map(|r| Ok((get(r, "owner")?, get(r, "n")?)))
            .transpose()
    }

    /// Releases every partition owned by `me` so others can take them at once.
    pub(crate) async fn release_all(&self, me: &SessionId) -> Result<u64> {
        self.run(sql!(self.driver;
            "UPDATE feed_partitions SET owner = NULL, version = version + 1, updated_at = {now} \
             WHERE owner = " {me}
        ))
        .await
    }

    /// Reopens `complete` partitions with ids in `(after, end]` that have
    /// an available item (a producer inserted it with plain SQL without
    /// reopening the partition).
    pub(crate) async fn reopen_stranded(&self, after: &str, end: &str) -> Result<u64> {
        let exists = item_exists(*self.driver, "i.status = 'available'", "feed_partitions.id");
        self.run(sql!(self.driver;
            "UPDATE feed_partitions SET status = 'available', version = version + 1, updated_at = {now} \
             WHERE status = 'complete' AND id > " {after} " AND id <= " {end} " AND " [&exists]
        ))
        .await
    }
}
