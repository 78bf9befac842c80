//! Producer tokens (`feed_producer_tokens`): each bound to a tenant, and
//! optionally to an id prefix and caps on the weight and max in flight it
//! may give a partition. Only a SHA-256 hash of a token is stored, so the
//! table gives no token away; the token is shown once, when created.

use super::driver::sql;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{NewItem, PartitionSpec, Store, get};
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

fn scope(r: &sea_orm::QueryResult) -> Result<ProducerScope> {
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
    })
}

const COLUMNS: &str = "id, tenant, prefix, max_weight, max_in_flight, created_at";

impl Store {
    /// Creates a producer token with `scope` (its `id` and `created_at`
    /// are set here); returns the scope as stored and the token, which is
    /// never shown again.
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
        self.run(sql!(self.driver;
            "INSERT INTO feed_producer_tokens (id, token_hash, tenant, prefix, max_weight, \
             max_in_flight, created_at) VALUES (" {id.as_str()} ", " {hash(&token)} ", " {scope.tenant.as_str()} ", " {scope.prefix.clone()} ", " {int(scope.max_weight)} ", " {int(scope.max_in_flight)} ", {now})"
        ))
        .await?;
        let stored = self
            .producer_tokens()
            .await?
            .into_iter()
            .find(|t| t.id == id);
        let stored = stored.ok_or_else(|| Error::NotFound(format!("producer token {id}")))?;
        Ok((stored, token))
    }

    /// Every producer token's scope (never the token), oldest first.
    pub async fn producer_tokens(&self) -> Result<Vec<ProducerScope>> {
        let sql = format!("SELECT {COLUMNS} FROM feed_producer_tokens ORDER BY created_at, id");
        self.fetch(sql!(self.driver; [&sql]))
            .await?
            .iter()
            .map(scope)
            .collect()
    }

    /// Revokes a producer token by its id: it stops working at once.
    /// False when there was none.
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
        rows.first().map(scope).transpose()
    }

    /// Whether any producer token exists.
    pub async fn has_producer_tokens(&self) -> Result<bool> {
        let rows = self
            .fetch(sql!(self.driver; "SELECT id FROM feed_producer_tokens LIMIT 1"))
            .await?;
        Ok(!rows.is_empty())
    }
}
