//! Flow control's shared state: per-tenant limits (`feed_limits`), token
//! buckets every processor claims from (`feed_buckets`), and each
//! session's share of a tenant's in-flight slots (`feed_slots`).

use std::time::Duration;

use sea_orm::ConnectionTrait;
use serde::Serialize;

use super::driver::{Sql, sql};
use super::probes::LIVE;
use super::{Store, get, ms};
use crate::ids::{PartitionId, SessionId, Tenant};
use crate::rate::Rate;
use crate::validate;
use crate::{Error, Result};

/// One tenant's limits, as `feed_limits` holds them (None = no limit).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Limit {
    /// The tenant, as `feed_partitions.tenant` names it.
    pub tenant: Tenant,
    /// Items of this tenant in flight at the handler, fleet-wide.
    pub max_in_flight: Option<u32>,
    /// Items of this tenant sent per second, fleet-wide.
    pub rate: Option<f64>,
    /// Items the rate may send at once after a quiet spell.
    pub burst: Option<u32>,
    /// The tenant's share of dispatch against other tenants (1 = even).
    pub weight: Option<u32>,
}

/// A partition's flow-control columns (only partitions that set one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Partition id.
    pub id: PartitionId,
    /// Its tenant.
    pub tenant: Option<Tenant>,
    /// Its share of dispatch within its tenant (or, without one, against others).
    pub weight: Option<u32>,
    /// Its own cap on items in flight.
    pub max_in_flight: Option<u32>,
    /// Its priority among the partitions it shares turns with.
    pub priority: i32,
}

/// A session's part of a tenant's slots: (session id, slots held, slots wanted).
pub type Share = (String, u32, u32);

/// Shares a tenant's cap out: given the cap, the slots this session has
/// calls in and every live session's [`Share`] (this one's first), the
/// slots this session gets.
pub type Grant = fn(u32, u32, &[Share]) -> u32;

/// A reservation that loses to others this many times in a row gives up
/// for the moment.
const RESERVE_TRIES: usize = 4;

/// Rows of partitions with flow-control columns set, read per chunk of ids.
const ATTRS_CHUNK: usize = 500;

/// A count from an `INTEGER` column; a negative one is no limit.
pub(super) fn nonneg(v: Option<i32>) -> Option<u32> {
    v.and_then(|n| u32::try_from(n).ok())
}

/// A count for an `INTEGER` column.
fn int(v: Option<u32>) -> sea_orm::Value {
    v.map(|n| i32::try_from(n).unwrap_or(i32::MAX)).into()
}

impl Store {
    /// Every tenant's limits, by tenant.
    pub async fn limits(&self) -> Result<Vec<Limit>> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT tenant, max_in_flight, rate, burst, weight FROM feed_limits ORDER BY tenant"
            ))
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Limit {
                    tenant: get(r, "tenant")?,
                    max_in_flight: nonneg(get(r, "max_in_flight")?),
                    rate: get::<Option<f64>>(r, "rate")?.filter(|r| *r > 0.0),
                    burst: nonneg(get(r, "burst")?),
                    weight: nonneg(get(r, "weight")?),
                })
            })
            .collect()
    }

    /// Writes a tenant's limits (all of its columns: read, change, write).
    /// A rate the limiter cannot pace (see [`Rate::new`]) is refused.
    pub async fn set_limit(&self, limit: &Limit) -> Result<()> {
        validate::id("tenant", &limit.tenant)?;
        if let Some(r) = limit.rate {
            Rate::new(r)
                .map_err(|e| Error::Invalid(format!("tenant {}'s rate: {e}", limit.tenant)))?;
        }
        let up = self.driver.upsert(
            "tenant",
            &["max_in_flight", "rate", "burst", "weight", "updated_at"],
        );
        self.run(sql!(self.driver;
            "INSERT INTO feed_limits (tenant, max_in_flight, rate, burst, weight, updated_at) VALUES ("
            {limit.tenant.as_str()} ", " {int(limit.max_in_flight)} ", " {limit.rate} ", "
            {int(limit.burst)} ", " {int(limit.weight)} ", {now})" [&up]
        ))
        .await?;
        Ok(())
    }

    /// Removes a tenant's limits; false when it had none.
    pub async fn clear_limit(&self, tenant: &Tenant) -> Result<bool> {
        validate::id("tenant", tenant)?;
        let n = self
            .run(sql!(self.driver; "DELETE FROM feed_limits WHERE tenant = " {tenant}))
            .await?;
        self.run(sql!(self.driver; "DELETE FROM feed_slots WHERE tenant = " {tenant}))
            .await?;
        Ok(n > 0)
    }

    /// The flow-control columns of those of `ids` that set any.
    pub(crate) async fn partition_attrs(&self, ids: &[PartitionId]) -> Result<Vec<Attrs>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(ATTRS_CHUNK) {
            let mut s = Sql::new(self.driver);
            s.push("SELECT id, tenant, weight, max_in_flight, priority FROM feed_partitions WHERE id IN (")
                .binds(chunk.iter().map(|id| id.clone().into()))
                .push(
                    ") AND (tenant IS NOT NULL OR weight IS NOT NULL OR max_in_flight IS NOT NULL \
                     OR priority <> 0)",
                );
            let rows = self.fetch(s.statement()).await?;
            for r in &rows {
                out.push(Attrs {
                    id: get(r, "id")?,
                    tenant: get(r, "tenant")?,
                    weight: nonneg(get(r, "weight")?),
                    max_in_flight: nonneg(get(r, "max_in_flight")?),
                    priority: get(r, "priority")?,
                });
            }
        }
        Ok(out)
    }

    /// Reserves `n` tokens of the shared bucket `name`, which pays for
    /// `rate` tokens a second and lets `burst` go at once after a quiet
    /// spell. Returns in how many microseconds the first may be spent
    /// (negative: some are due already; the k-th comes due `k / rate`
    /// seconds after that), or None when other processors kept moving the
    /// bucket on (ask again shortly).
    ///
    /// The bucket keeps the time up to which its reserved tokens are paid
    /// for (`paid_until`); a reservation moves it on by `n / rate` from
    /// that time or from now, whichever is later, and each token may be
    /// spent `burst / rate` before it is paid for. So no interval sees more
    /// than its length times `rate`, plus `burst`, tokens spent, and a
    /// processor that reserves ahead loses nothing to its own latency.
    pub(crate) async fn reserve(
        &self,
        name: &str,
        n: f64,
        rate: f64,
        burst: f64,
    ) -> Result<Option<i64>> {
        let micros = |tokens: f64| (tokens / rate * 1e6).round() as i64;
        let (cost, tolerance) = (micros(n), micros(burst));
        for _ in 0..RESERVE_TRIES {
            let rows = self
                .fetch(sql!(self.driver;
                    "SELECT paid_until, {now} AS now FROM feed_buckets WHERE name = " {name}
                ))
                .await?;
            let Some(row) = rows.first() else {
                let keep = self.driver.upsert("name", &[]);
                self.run(sql!(self.driver;
                    "INSERT INTO feed_buckets (name, paid_until) VALUES (" {name} ", 0)" [&keep]
                ))
                .await?;
                continue;
            };
            let paid: i64 = get(row, "paid_until")?;
            let now = get::<i64>(row, "now")? * 1000;
            let start = paid.max(now);
            // Saturating: a rate is at least 1/h (`Rate::MIN`), but a row
            // written by hand must not overflow the arithmetic either.
            let until = start.saturating_add(cost);
            let moved = self.run(sql!(self.driver;
                "UPDATE feed_buckets SET paid_until = " {until} " WHERE name = " {name} " AND paid_until = " {paid}
            ))
                .await?;
            if moved == 1 {
                return Ok(Some(start.saturating_sub(tolerance).saturating_sub(now)));
            }
        }
        Ok(None)
    }

    /// Sets `me`'s share of `tenant`'s in-flight slots, under the lock of
    /// the tenant's limits row so that the live sessions' shares never add
    /// up to more than its `max_in_flight`. `in_use` are the slots `me` has
    /// calls in (kept whatever the share), `wanted` how many it could use.
    /// `grant` shares the cap out given `(cap, in_use, [(session, slots
    /// held, slots wanted)…], me first)`. Returns the slots granted; None
    /// when the tenant has no cap.
    pub(crate) async fn claim_slots(
        &self,
        tenant: &Tenant,
        me: &SessionId,
        in_use: u32,
        wanted: u32,
        expiry: Duration,
        grant: Grant,
    ) -> Result<Option<u32>> {
        let b = self.driver;
        let lock = sql!(b;
            "SELECT max_in_flight FROM feed_limits WHERE tenant = " {tenant} [b.dialect().for_update]
        );
        let reap = sql!(b;
            "DELETE FROM feed_slots WHERE tenant = " {tenant} " AND session_id NOT IN " [LIVE]
            {ms(expiry)} ")"
        );
        let others = sql!(b;
            "SELECT session_id, slots, wanted FROM feed_slots WHERE tenant = " {tenant} " AND session_id <> " {me}
        );
        self.retry(|| async {
            let txn = self.begin_immediate().await?;
            self.count(3);
            let row = txn.query_all_raw(lock.clone()).await?;
            let cap = match row.first() {
                Some(r) => r.try_get::<Option<i32>>("", "max_in_flight")?,
                None => None,
            };
            let Some(cap) = nonneg(cap) else {
                txn.execute_raw(sql!(b;
                    "DELETE FROM feed_slots WHERE tenant = " {tenant} " AND session_id = " {me}
                ))
                .await?;
                self.commit(txn).await?;
                return Ok(None);
            };
            txn.execute_raw(reap.clone()).await?;
            let mut shares = vec![(me.to_string(), 0u32, wanted)];
            for r in txn.query_all_raw(others.clone()).await? {
                let id: String = r.try_get("", "session_id")?;
                let slots: i32 = r.try_get("", "slots")?;
                let want: i32 = r.try_get("", "wanted")?;
                shares.push((
                    id,
                    nonneg(Some(slots)).unwrap_or(0),
                    nonneg(Some(want)).unwrap_or(0),
                ));
            }
            let granted = grant(cap, in_use, &shares);
            let write = if granted == 0 && wanted == 0 {
                sql!(b;
                    "DELETE FROM feed_slots WHERE tenant = " {tenant} " AND session_id = " {me}
                )
            } else {
                let up = b.upsert("tenant, session_id", &["slots", "wanted"]);
                sql!(b;
                    "INSERT INTO feed_slots (tenant, session_id, slots, wanted) VALUES ("
                    {tenant} ", " {me} ", " {int(Some(granted))} ", " {int(Some(wanted))} ")" [&up]
                )
            };
            txn.execute_raw(write).await?;
            self.commit(txn).await?;
            Ok(Some(granted))
        })
        .await
    }

    /// Gives back every slot `me` holds (at shutdown).
    pub(crate) async fn release_slots(&self, me: &SessionId) -> Result<()> {
        self.run(sql!(self.driver; "DELETE FROM feed_slots WHERE session_id = " {me}))
            .await?;
        Ok(())
    }
}
