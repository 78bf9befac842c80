//! Producer tokens (`feed_producer_tokens`): each bound to a tenant, and
//! optionally to an id prefix and caps on the weight and max in flight it
//! may give a partition. Only a SHA-256 hash of a token is stored, so the
//! table gives no token away; the token is shown once, when created.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseTransaction};
use sha2::{Digest, Sha256};

use super::driver::{is_transient, sql};
use super::scope::{ProducerScope, overlap};
use super::{NewItem, Store, get};
use crate::backoff::Backoff;
use crate::{Error, Result, validate};

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
        let locks = b.dialect().token_locks;
        let txn = self.bounded(self.begin_at(locks.isolation)).await?;
        if let Some(lock) = locks.create {
            self.bounded(txn.execute_unprepared(lock)).await?;
        }
        let tokens = self.every_token(&txn, b.dialect().for_update).await?;
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
        let locks = b.dialect().token_locks;
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
