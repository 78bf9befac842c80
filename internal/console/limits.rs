//! Per-tenant limits as the console changes them: a change to some of a
//! tenant's limits, from the API's JSON body or the page's form, applied
//! as `processor limits set` applies its flags (what is not given keeps its
//! value; a max in flight of 0 is no cap).

use serde_json::Value;

use crate::limits::Rate;
use crate::store::limits::Limit;
use crate::{Error, Result, Store, validate};

/// The highest count a limit's `INTEGER` column holds.
const MAX_COUNT: u64 = i32::MAX as u64;
/// Weights run from 1 to this.
pub(super) const MAX_WEIGHT: u32 = 1000;

/// What a limit has, for error messages.
const FIELDS: &str = "max_in_flight, rate, burst and weight";

/// A change to a tenant's limits: None keeps a value, Some(None) removes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Change {
    /// Items of the tenant in flight at once (Some(None): no cap).
    pub max_in_flight: Option<Option<u32>>,
    /// Items per second.
    pub rate: Option<Option<f64>>,
    /// Items the rate may send at once after a quiet spell.
    pub burst: Option<Option<u32>>,
    /// Share of dispatch against other tenants.
    pub weight: Option<Option<u32>>,
}

/// How a value says "remove it": `null` in JSON, `none` in the form.
#[derive(Clone, Copy)]
enum Source {
    Json,
    Form,
}

impl Source {
    fn none(self) -> &'static str {
        match self {
            Source::Json => "null",
            Source::Form => "none",
        }
    }
}

fn invalid(message: String) -> Error {
    Error::Invalid(message)
}

/// A count field's error: what to write instead.
fn bad_count(field: &str, from: Source) -> Error {
    let (low, meaning) = match field {
        "max_in_flight" => (0, "no cap; 0 means no cap too"),
        "burst" => (0, "the default, 100 ms of the rate"),
        _ => (1, "the default, 1"),
    };
    let high = if field == "weight" {
        u64::from(MAX_WEIGHT)
    } else {
        MAX_COUNT
    };
    invalid(format!(
        "{field} must be a whole number from {low} to {high}, or {} for {meaning}",
        from.none()
    ))
}

/// A count within its field's range.
fn count(field: &str, n: Option<u64>, from: Source) -> Result<u32> {
    let range = if field == "weight" {
        1..=u64::from(MAX_WEIGHT)
    } else {
        0..=MAX_COUNT
    };
    n.filter(|n| range.contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad_count(field, from))
}

/// A rate as written (`100/s`, `30/m`, `250`), with Rate's own error text.
fn rate(text: &str, from: Source) -> Result<f64> {
    text.parse::<Rate>()
        .map(|r| r.0)
        .map_err(|e| invalid(format!("{e}, or {} for no rate", from.none())))
}

/// A JSON object's fields in the order sent, a field given twice kept
/// twice (a map would keep only the last, silently).
struct Fields(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Fields, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Change {
    /// From the API's JSON object: a field absent keeps its value, `null`
    /// removes it. An empty body changes nothing.
    pub(super) fn from_json(body: &[u8]) -> Result<Change> {
        let from = Source::Json;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Change::default());
        }
        let Fields(fields) = serde_json::from_slice(body).map_err(|_| {
            invalid(format!(
                "the body must be a JSON object with any of {FIELDS}, \
                 e.g. {{\"max_in_flight\": 10, \"rate\": \"100/s\", \"weight\": 2}}"
            ))
        })?;
        let mut seen = std::collections::HashSet::new();
        if let Some((twice, _)) = fields.iter().find(|(f, _)| !seen.insert(f.as_str())) {
            return Err(invalid(format!(
                "field {:?} is given twice; give each field once",
                crate::printable::printable(&crate::validate::shown(twice))
            )));
        }
        let mut c = Change::default();
        for (field, v) in &fields {
            let n = || -> Result<Option<u32>> {
                match v {
                    Value::Null => Ok(None),
                    v => count(field, v.as_u64(), from).map(Some),
                }
            };
            match field.as_str() {
                "max_in_flight" => c.max_in_flight = Some(n()?.filter(|m| *m > 0)),
                "burst" => c.burst = Some(n()?),
                "weight" => c.weight = Some(n()?),
                "rate" => {
                    c.rate = Some(match v {
                        Value::Null => None,
                        Value::String(s) if s.trim() == "none" => None,
                        Value::String(s) => Some(rate(s, from)?),
                        // A number is items per second, checked as Rate checks it.
                        other => Some(rate(&other.to_string(), from)?),
                    })
                }
                other => {
                    return Err(invalid(format!(
                        "unknown field {:?}; a limit has {FIELDS}",
                        crate::printable::printable(&crate::validate::shown(other))
                    )));
                }
            }
        }
        Ok(c)
    }

    /// From the page's form: an empty field keeps its value, `none`
    /// removes it.
    pub(super) fn from_form(
        max_in_flight: &str,
        rate_text: &str,
        burst: &str,
        weight: &str,
    ) -> Result<Change> {
        let from = Source::Form;
        let field = |name: &str, text: &str| -> Result<Option<Option<u32>>> {
            match text.trim() {
                "" => Ok(None),
                "none" => Ok(Some(None)),
                t => count(name, t.parse().ok(), from).map(|n| Some(Some(n))),
            }
        };
        Ok(Change {
            max_in_flight: field("max_in_flight", max_in_flight)?.map(|m| m.filter(|m| *m > 0)),
            rate: match rate_text.trim() {
                "" => None,
                "none" => Some(None),
                t => Some(Some(rate(t, from)?)),
            },
            burst: field("burst", burst)?,
            weight: field("weight", weight)?,
        })
    }

    /// `current` with this change made.
    pub(super) fn applied(&self, current: &Limit) -> Limit {
        let mut l = current.clone();
        if let Some(m) = self.max_in_flight {
            l.max_in_flight = m;
        }
        if let Some(r) = self.rate {
            l.rate = r;
        }
        if let Some(b) = self.burst {
            l.burst = b;
        }
        if let Some(w) = self.weight {
            l.weight = w;
        }
        l
    }
}

/// The tenant's limits as they are (all None when it has none).
pub(super) async fn current(store: &Store, tenant: &str) -> Result<Limit> {
    validate::id("tenant", tenant)?;
    Ok(store
        .limits()
        .await?
        .into_iter()
        .find(|l| l.tenant == tenant)
        .unwrap_or_else(|| Limit {
            tenant: tenant.into(),
            ..Limit::default()
        }))
}

/// Makes `change` to `tenant`'s limits; returns them as they are now.
pub(super) async fn set(store: &Store, tenant: &str, change: &Change) -> Result<Limit> {
    let limit = change.applied(&current(store, tenant).await?);
    store.set_limit(&limit).await?;
    tracing::info!(tenant = %tenant, limits = %describe(&limit), "operator set a tenant's limits");
    Ok(limit)
}

/// Removes `tenant`'s limits; false when it had none.
pub(super) async fn clear(store: &Store, tenant: &str) -> Result<bool> {
    validate::id("tenant", tenant)?;
    let removed = store.clear_limit(&tenant.into()).await?;
    tracing::info!(tenant = %tenant, removed, "operator cleared a tenant's limits");
    Ok(removed)
}

/// A rate as people write it ("100/s", "30/m"), or "-".
pub(super) fn shown_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".into(), |r| Rate(r).to_string())
}

/// "max in flight 10, rate 100/s, burst -, weight 1".
pub(super) fn describe(l: &Limit) -> String {
    let or_dash = |v: Option<u32>| v.map_or_else(|| "-".into(), |n| n.to_string());
    format!(
        "max in flight {}, rate {}, burst {}, weight {}",
        or_dash(l.max_in_flight),
        shown_rate(l.rate),
        or_dash(l.burst),
        l.weight.unwrap_or(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Result<Change> {
        Change::from_json(body.as_bytes())
    }

    #[test]
    fn json_changes() {
        assert_eq!(json("").unwrap(), Change::default());
        assert_eq!(json("{}").unwrap(), Change::default());
        let c =
            json(r#"{"max_in_flight": 0, "rate": "30/m", "burst": null, "weight": 3}"#).unwrap();
        assert_eq!(
            c,
            Change {
                max_in_flight: Some(None),
                rate: Some(Some(0.5)),
                burst: Some(None),
                weight: Some(Some(3)),
            }
        );
        assert_eq!(json(r#"{"rate": 250}"#).unwrap().rate, Some(Some(250.0)));
        assert_eq!(json(r#"{"rate": null}"#).unwrap().rate, Some(None));
        assert_eq!(
            json(r#"{"max_in_flight": 7}"#).unwrap().max_in_flight,
            Some(Some(7))
        );
        for (body, says) in [
            (r#"{"rate": "fast"}"#, "e.g. 500/s"),
            (r#"{"rate": 0}"#, "e.g. 500/s"),
            (r#"{"rate": true}"#, "e.g. 500/s"),
            (r#"{"weight": 0}"#, "from 1 to 1000"),
            (r#"{"weight": 1001}"#, "from 1 to 1000"),
            (r#"{"max_in_flight": -1}"#, "whole number"),
            (r#"{"burst": 1.5}"#, "whole number"),
            (r#"{"burst": "10"}"#, "whole number"),
            (r#"{"max_in_flight": 2147483648}"#, "2147483647"),
            (r#"{"colour": 1}"#, "unknown field"),
            (r#"{"rate": "10/s", "rate": "1000/s"}"#, "given twice"),
            ("[1]", "JSON object"),
            ("nope", "JSON object"),
        ] {
            let e = json(body).unwrap_err().to_string();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn form_changes() {
        assert_eq!(
            Change::from_form("", "", "", "").unwrap(),
            Change::default()
        );
        let c = Change::from_form("0", "100/s", "none", " 2 ").unwrap();
        assert_eq!(
            c,
            Change {
                max_in_flight: Some(None),
                rate: Some(Some(100.0)),
                burst: Some(None),
                weight: Some(Some(2)),
            }
        );
        let e = Change::from_form("", "5/d", "", "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("e.g. 500/s") && e.contains("none for no rate"),
            "{e}"
        );
        assert!(Change::from_form("x", "", "", "").is_err());
        assert!(Change::from_form("", "", "", "0").is_err());
    }

    #[test]
    fn absent_fields_keep_their_value() {
        let before = Limit {
            tenant: "t".into(),
            max_in_flight: Some(5),
            rate: Some(10.0),
            burst: Some(3),
            weight: Some(2),
        };
        let after = json(r#"{"rate": "20/s", "burst": null}"#)
            .unwrap()
            .applied(&before);
        assert_eq!(
            after,
            Limit {
                rate: Some(20.0),
                burst: None,
                ..before.clone()
            }
        );
        assert_eq!(
            describe(&after),
            "max in flight 5, rate 20/s, burst -, weight 2"
        );
    }
}
