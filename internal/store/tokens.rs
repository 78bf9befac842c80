//! Producer tokens (`feed_producer_tokens`): each bound to a tenant, and
//! optionally to an id prefix and caps on the weight and max in flight it
//! may give a partition. Only a SHA-256 hash of a token is stored, so the
//! table gives no token away; the token is shown once, when created.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseTransaction};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::driver::{is_transient, sql};
use super::{NewItem, PartitionSpec, Store, get};
use crate::backoff::Backoff;
use crate::ids::Tenant;
use crate::{Error, Result, validate};

/// What a producer token may do: enqueue into its tenant's partitions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProducerScope {
    /// Its public id, which lists and revokes it (not a secret).
    pub id: String,
    /// The tenant every partition it creates belongs to, and the only
    /// tenant whose partitions it may add to; empty for the legacy
    /// `--producer-token` ([`ProducerScope::legacy`]): partitions of no
    /// tenant only.
    pub tenant: Tenant,
    /// Partition ids and the item ids it gives must start with this.
    pub prefix: Option<String>,
    /// The highest `weight` it may give a partition (None: none; the default applies).
    pub max_weight: Option<u32>,
    /// The highest `max_in_flight` it may give a partition (None: none).
    pub max_in_flight: Option<u32>,
    /// When it was created (epoch ms, database clock).
    pub created_at: i64,
    /// Read from `feed_producer_tokens` (not built by hand, not the
    /// legacy token's): an enqueue with it checks, in its transaction, that
    /// the token was not revoked meanwhile.
    #[serde(skip)]
    pub(crate) stored: bool,
}

impl ProducerScope {
    /// A scope for `tenant` (checked like every tenant), without a
    /// prefix or caps.
    pub fn new(tenant: impl Into<String>) -> Result<Self> {
        let tenant = tenant.into();
        validate::id("tenant", &tenant)?;
        Ok(Self {
            tenant: tenant.into(),
            ..Self::default()
        })
    }
}

impl ProducerScope {
    /// The legacy `--producer-token`'s scope, the narrowest there is:
    /// partitions of no tenant only, no weight or in-flight cap of its own.
    pub fn legacy() -> Self {
        Self {
            id: "--producer-token".into(),
            ..Self::default()
        }
    }

    /// The tenant its partitions belong to; None for [`Self::legacy`].
    pub fn tenant(&self) -> Option<&str> {
        Some(self.tenant.as_str()).filter(|t| !t.is_empty())
    }

    /// Refuses what this token may not do with an enqueue into
    /// `partition` ([`Error::Forbidden`]), and binds a partition it
    /// creates to its tenant.
    pub(crate) fn admit(
        &self,
        partition: &str,
        spec: &mut PartitionSpec,
        items: &[NewItem],
    ) -> Result<()> {
        let refuse = |why: String| {
            Err(Error::Forbidden(format!(
                "producer token {}: {why}",
                self.id
            )))
        };
        // A malformed tenant is the request's fault (400), whoever sends it.
        if let Some(t) = &spec.tenant {
            validate::id("tenant", t)?;
        }
        match (&spec.tenant, self.tenant()) {
            (Some(_), None) => {
                return refuse(
                    "it may not choose a tenant; give the producer a token of its own: \
                     processor tokens create --tenant T"
                        .into(),
                );
            }
            (Some(t), Some(mine)) if t.as_str() != mine => {
                return refuse(format!(
                    "it is bound to tenant {mine:?}, not {:?}",
                    t.as_str()
                ));
            }
            (_, mine) => spec.tenant = mine.map(Tenant::from),
        }
        if let Some(p) = &self.prefix {
            if !partition.starts_with(p.as_str()) {
                return refuse(format!("partition ids must start with {p:?}"));
            }
            if let Some(id) = items
                .iter()
                .filter_map(|i| i.id.as_deref())
                .find(|id| !id.starts_with(p.as_str()))
            {
                return refuse(format!(
                    "item ids must start with {p:?}, and {id:?} does not"
                ));
            }
        }
        let over =
            |asked: Option<u32>, cap: Option<u32>| asked.is_some_and(|a| cap.is_none_or(|c| a > c));
        if over(spec.weight, self.max_weight) {
            return refuse(format!("weight may be at most {}", shown(self.max_weight)));
        }
        if over(spec.max_in_flight, self.max_in_flight) {
            return refuse(format!(
                "max_in_flight may be at most {}",
                shown(self.max_in_flight)
            ));
        }
        // A capped token's partitions are capped even when the producer
        // leaves the parameter out (the processor's default is no cap).
        if spec.max_in_flight.is_none() {
            spec.max_in_flight = self.max_in_flight;
        }
        Ok(())
    }
}

impl ProducerScope {
    /// The token among `tokens` of another tenant whose prefix `id` starts
    /// with: the ids in it are that tenant's to give.
    fn owner_of<'a>(&self, tokens: &'a [ProducerScope], id: &str) -> Option<&'a ProducerScope> {
        tokens.iter().find(|t| {
            t.tenant != self.tenant && t.prefix.as_deref().is_some_and(|p| id.starts_with(p))
        })
    }

    /// Refuses ([`Error::Forbidden`]) a partition this token creates
    /// (`created`) or an item id it gives that starts with the prefix of
    /// another tenant's token among `tokens`: without it, a token without a
    /// prefix could take ids that tenant's producers will give, and they
    /// would be refused their own. Generated ids are random, and pass.
    pub(super) fn keep_out(
        &self,
        tokens: &[ProducerScope],
        created: Option<&str>,
        items: &[NewItem],
    ) -> Result<()> {
        let given = items
            .iter()
            .filter(|i| !i.generated)
            .filter_map(|i| i.id.as_deref().map(|id| ("item", id)));
        let ids = created.map(|p| ("partition", p)).into_iter().chain(given);
        for (what, id) in ids {
            let Some(owner) = self.owner_of(tokens, id) else {
                continue;
            };
            let prefix = owner.prefix.as_deref().unwrap_or_default();
            let own = match &self.prefix {
                Some(p) => format!("ids that start with this token's own prefix {p:?}"),
                None => "ids outside it, or a token with a prefix of its own \
                         (processor tokens create --tenant T --prefix P)"
                    .into(),
            };
            return Err(Error::Forbidden(format!(
                "producer token {}: {what} id {id:?} starts with {prefix:?}, the prefix of \
                 producer token {} of another tenant, whose ids those are; nothing was written. \
                 Use {own}",
                self.id, owner.id
            )));
        }
        Ok(())
    }
}

/// Whether two prefixes overlap, byte for byte: one starts with the
/// other, so that some ids start with both.
fn overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A cap as an error shows it.
fn shown(cap: Option<u32>) -> String {
    cap.map_or("the default (this token may not set it)".into(), |c| {
        c.to_string()
    })
}

/// The hex SHA-256 of a token: what the table keeps.
fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A count for an `INTEGER` column.
fn int(v: Option<u32>) -> sea_orm::Value {
    v.map(|n| i32::try_from(n).unwrap_or(i32::MAX)).into()
}

/// A token's scope as `feed_producer_tokens` holds it.
fn row_scope(r: &sea_orm::QueryResult) -> Result<ProducerScope> {
    let count = |col| -> Result<Option<u32>> {
        Ok(get::<Option<i32>>(r, col)?.and_then(|n| u32::try_from(n).ok()))
    };
    Ok(ProducerScope {
        id: get(r, "id")?,
        tenant: get(r, "tenant")?,
        prefix: get(r, "prefix")?,
        max_weight: count("max_weight")?,
        max_in_flight: count("max_in_flight")?,
        created_at: get(r, "created_at")?,
        stored: true,
    })
}

const COLUMNS: &str = "id, tenant, prefix, max_weight, max_in_flight, created_at";

impl Store {
    /// Creates a producer token with `scope` (its `id` and `created_at`
    /// are set here); returns the scope as stored and the token, which is
    /// never shown again. A prefix that overlaps (one starts with the
    /// other) the prefix of another tenant's token is refused
    /// ([`Error::Conflict`]): the ids in both would be both tenants'. The
    /// check and the insert are one transaction that no other creation
    /// runs beside, nor a scoped enqueue (the driver's `TokenLocks`).
    pub async fn create_producer_token(
        &self,
        scope: &ProducerScope,
    ) -> Result<(ProducerScope, String)> {
        validate::id("tenant", &scope.tenant)?;
        if let Some(p) = &scope.prefix {
            validate::id("prefix", p)?;
        }
        if scope.max_weight.is_some_and(|w| !(1..=1000).contains(&w))
            || scope.max_in_flight == Some(0)
        {
            return Err(Error::Invalid(
                "max weight runs from 1 to 1000, and max in flight must be at least 1".into(),
            ));
        }
        let id = format!("pt-{}", hex::encode(rand::random::<[u8; 6]>()));
        let token = format!("fpt_{}", hex::encode(rand::random::<[u8; 32]>()));
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(2));
        for attempt in 1.. {
            match self.insert_token(&id, &token, scope).await {
                // Two creations at once on MySQL: one is the deadlock's victim.
                Err(Error::Db(e)) if attempt < 8 && is_transient(&e) => backoff.wait().await,
                Err(e) => return Err(e),
                Ok(()) => break,
            }
        }
        let stored = self
            .producer_tokens()
            .await?
            .into_iter()
            .find(|t| t.id == id);
        let stored = stored.ok_or_else(|| Error::NotFound(format!("producer token {id}")))?;
        Ok((stored, token))
    }

    /// One attempt of [`Store::create_producer_token`]: every token read
    /// and locked, the prefix checked against them, the token inserted.
    async fn insert_token(&self, id: &str, token: &str, scope: &ProducerScope) -> Result<()> {
        let b = self.driver;
        let locks = b.token_locks();
        let txn = self.bounded(self.begin_at(locks.isolation)).await?;
        if let Some(lock) = locks.create {
            self.bounded(txn.execute_unprepared(lock)).await?;
        }
        let tokens = self.every_token(&txn, b.for_update()).await?;
        if let Some(p) = &scope.prefix
            && let Some(other) = tokens.iter().find(|t| {
                t.tenant != scope.tenant && t.prefix.as_deref().is_some_and(|q| overlap(p, q))
            })
        {
            let (q, them) = (other.prefix.as_deref().unwrap_or_default(), &other.id);
            return Err(Error::Conflict(format!(
                "the prefix {p:?} overlaps the prefix {q:?} of producer token {them} of tenant \
                 {:?} (one starts with the other, so some ids would be both tenants'); no token \
                 was created. Choose a prefix that neither starts with {q:?} nor is the start of \
                 it, or revoke {them} first (processor tokens revoke {them})",
                other.tenant.as_str(),
            )));
        }
        self.bounded(txn.execute_raw(sql!(b;
            "INSERT INTO feed_producer_tokens (id, token_hash, tenant, prefix, max_weight, \
             max_in_flight, created_at) VALUES (" {id} ", " {hash(token)} ", " {scope.tenant.as_str()} ", " {scope.prefix.clone()} ", " {int(scope.max_weight)} ", " {int(scope.max_in_flight)} ", {now})"
        )))
        .await?;
        self.bounded(self.commit(txn)).await?;
        Ok(())
    }

    /// In an enqueue's transaction, once its partition is locked: refuses
    /// the enqueue of a token revoked since its request was let in
    /// ([`Error::Unauthorized`]), and a partition it creates (`created`) or
    /// an item id it gives in another tenant's prefix ([`Error::Forbidden`]).
    /// The locks taken hold to commit: a revoke of the token waits for the
    /// enqueue, and a token's creation either waits for it or is seen by it.
    pub(super) async fn hold_scope(
        &self,
        txn: &DatabaseTransaction,
        me: &ProducerScope,
        created: Option<&str>,
        items: &[NewItem],
    ) -> Result<()> {
        let b = self.driver;
        let locks = b.token_locks();
        // For the legacy token too: on PostgreSQL the lock on the table
        // that this takes, even of no row, is what a creation waits for.
        let own = self
            .bounded(txn.query_all_raw(sql!(b;
                "SELECT id FROM feed_producer_tokens WHERE id = " {me.id.as_str()} [locks.own]
            )))
            .await?;
        if me.stored && own.is_empty() {
            tracing::info!(token = %me.id, "enqueue of a revoked producer token refused");
            return Err(Error::Unauthorized(format!(
                "producer token {} was revoked; nothing was written",
                me.id
            )));
        }
        let tokens = self.every_token(txn, locks.every).await?;
        me.keep_out(&tokens, created, items)
    }

    /// Every token's scope, read in `txn` with the lock clause `lock`.
    async fn every_token(
        &self,
        txn: &DatabaseTransaction,
        lock: &str,
    ) -> Result<Vec<ProducerScope>> {
        let sql = format!("SELECT {COLUMNS} FROM feed_producer_tokens{lock}");
        self.bounded(txn.query_all_raw(sql!(self.driver; [&sql])))
            .await?
            .iter()
            .map(row_scope)
            .collect()
    }

    /// Every producer token's scope (never the token), oldest first.
    pub async fn producer_tokens(&self) -> Result<Vec<ProducerScope>> {
        let sql = format!("SELECT {COLUMNS} FROM feed_producer_tokens ORDER BY created_at, id");
        self.fetch(sql!(self.driver; [&sql]))
            .await?
            .iter()
            .map(row_scope)
            .collect()
    }

    /// Revokes a producer token by its id: it stops working at once. An
    /// enqueue of it under way has either committed when this returns, or
    /// writes nothing ([`Store::enqueue_as`]). False when there was none.
    pub async fn revoke_producer_token(&self, id: &str) -> Result<bool> {
        validate::filter("token id", id)?;
        let n = self
            .run(sql!(self.driver; "DELETE FROM feed_producer_tokens WHERE id = " {id}))
            .await?;
        Ok(n > 0)
    }

    /// The scope of the producer token `token`; None when it is no
    /// producer token (the lookup is by its hash).
    pub async fn producer_scope(&self, token: &str) -> Result<Option<ProducerScope>> {
        let sql = format!("SELECT {COLUMNS} FROM feed_producer_tokens WHERE token_hash = ");
        let rows = self.fetch(sql!(self.driver; [&sql] {hash(token)})).await?;
        rows.first().map(row_scope).transpose()
    }

    /// Whether any producer token exists.
    pub async fn has_producer_tokens(&self) -> Result<bool> {
        let rows = self
            .fetch(sql!(self.driver; "SELECT id FROM feed_producer_tokens LIMIT 1"))
            .await?;
        Ok(!rows.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str, tenant: &str, prefix: Option<&str>) -> ProducerScope {
        let mut t = ProducerScope::new(tenant).unwrap();
        t.id = id.into();
        t.prefix = prefix.map(str::to_string);
        t
    }

    fn item(id: &str) -> NewItem {
        NewItem::new(b"1".to_vec()).with_id(id)
    }

    #[test]
    fn prefixes_overlap_when_one_starts_with_the_other() {
        for (a, b) in [("a-", "a-x"), ("a-x", "a-"), ("a-", "a-"), ("a", "a-")] {
            assert!(overlap(a, b), "{a} {b}");
        }
        for (a, b) in [("a-", "b-"), ("a-", "A-"), ("ab", "ac"), ("a-x", "a-y")] {
            assert!(!overlap(a, b), "{a} {b}");
        }
    }

    #[test]
    fn ids_in_another_tenants_prefix_are_refused() {
        let tokens = [
            token("pt-a", "acme", Some("a-")),
            token("pt-any", "acme", None),
            token("pt-b", "beta", None),
        ];
        let beta = &tokens[2];
        let refused = [
            (Some("a-squat"), vec![], "partition id \"a-squat\""),
            (
                Some("b-1"),
                vec![item("a-future-1")],
                "item id \"a-future-1\"",
            ),
            (None, vec![item("b-2"), item("a-2")], "item id \"a-2\""),
        ];
        for (created, items, says) in refused {
            let e = beta.keep_out(&tokens, created, &items).unwrap_err();
            let Error::Forbidden(m) = e else {
                panic!("{e}")
            };
            assert!(
                m.contains(says) && m.contains("producer token pt-a "),
                "{m}"
            );
            assert!(m.contains("a prefix of its own"), "what to do: {m}");
        }
        let legacy = ProducerScope::legacy();
        assert!(legacy.keep_out(&tokens, Some("a-x"), &[]).is_err());

        // An existing partition, ids outside the prefix, the tenant's own
        // tokens and generated ids pass.
        assert!(beta.keep_out(&tokens, None, &[item("b-3")]).is_ok());
        assert!(beta.keep_out(&tokens, Some("a"), &[item("a_1")]).is_ok());
        let generated = NewItem::new(b"1".to_vec()).with_generated_id("a-0c1e".into());
        assert!(beta.keep_out(&tokens, Some("b-4"), &[generated]).is_ok());
        let acme = &tokens[1];
        assert!(acme.keep_out(&tokens, Some("a-1"), &[item("a-2")]).is_ok());
    }
}
