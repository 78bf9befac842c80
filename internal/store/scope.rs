//! What a producer token may do (`ProducerScope`): its tenant, its id
//! prefix and its caps, and the checks an enqueue with it passes. The
//! table that keeps tokens is `tokens`.

use serde::Serialize;

use super::{NewItem, PartitionSpec};
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
pub(super) fn overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A cap as an error shows it.
fn shown(cap: Option<u32>) -> String {
    cap.map_or("the default (this token may not set it)".into(), |c| {
        c.to_string()
    })
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
