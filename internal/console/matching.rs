//! Which partitions a list or a bulk action picks, as a request gives it
//! (the API's query, the partitions page's form, a bulk action's body):
//! every field is text, an empty one is no filter, and one parse turns
//! it into the store's filter, so the console, the API and bulk actions
//! read a filter the same way.

use serde::Deserialize;

use crate::Error;
use crate::store::listing::PartitionFilter;

/// A partition filter as given.
#[derive(Deserialize, Default, Clone, Debug)]
pub(super) struct Matching {
    pub(super) status: Option<String>,
    pub(super) tenant: Option<String>,
    pub(super) prefix: Option<String>,
    /// A gate number.
    pub(super) gate: Option<String>,
    /// An age such as `30m` or `2h`: partitions created at least that long ago.
    pub(super) older_than: Option<String>,
    /// Text in the `last_error` of one of its items.
    pub(super) error: Option<String>,
}

/// A field's value when it says anything.
fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

impl Matching {
    /// The store's filter (no page set), or why the text cannot be one.
    pub(super) fn filter(&self) -> crate::Result<PartitionFilter> {
        let gate = given(&self.gate)
            .map(|g| {
                g.parse::<i64>()
                    .map_err(|_| Error::Invalid(format!("gate must be a whole number, not {g:?}")))
            })
            .transpose()?;
        let min_age_ms = given(&self.older_than)
            .map(|a| {
                humantime::parse_duration(&a)
                    .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
                    .map_err(|e| {
                        Error::Invalid(format!(
                            "older_than must be an age such as 30m or 2h ({e}), not {a:?}"
                        ))
                    })
            })
            .transpose()?;
        Ok(PartitionFilter {
            status: given(&self.status),
            tenant: given(&self.tenant),
            prefix: given(&self.prefix),
            error: given(&self.error),
            gate,
            min_age_ms,
            ..Default::default()
        })
    }

    /// The fields that say something, as `name=value` pairs.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("status", &self.status),
            ("tenant", &self.tenant),
            ("prefix", &self.prefix),
            ("gate", &self.gate),
            ("older_than", &self.older_than),
            ("error", &self.error),
        ]
        .into_iter()
        .filter_map(|(k, v)| given(v).map(|v| (k, v)))
        .collect()
    }

    /// The filter as the audit records it and a question names it.
    pub(super) fn described(&self) -> String {
        let set: Vec<String> = self
            .pairs()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if set.is_empty() {
            "every partition".into()
        } else {
            set.join(", ")
        }
    }

    /// Every field with its value ("" when not set), for forms.
    pub(super) fn fields(&self) -> Vec<(&'static str, String)> {
        let v = |f: &Option<String>| f.clone().unwrap_or_default();
        vec![
            ("status", v(&self.status)),
            ("tenant", v(&self.tenant)),
            ("prefix", v(&self.prefix)),
            ("gate", v(&self.gate)),
            ("older_than", v(&self.older_than)),
            ("error", v(&self.error)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_a_filter_or_says_why_not() {
        let m = Matching {
            gate: Some("2".into()),
            older_than: Some("90m".into()),
            error: Some(" timeout ".into()),
            status: Some(String::new()),
            ..Default::default()
        };
        let f = m.filter().unwrap();
        assert_eq!(
            (f.gate, f.min_age_ms, f.status),
            (Some(2), Some(5_400_000), None)
        );
        assert_eq!(f.error.as_deref(), Some("timeout"));
        assert_eq!(m.described(), "gate=2, older_than=90m, error=timeout");
        let bad = Matching {
            gate: Some("two".into()),
            ..Default::default()
        };
        assert!(
            bad.filter()
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        let bad = Matching {
            older_than: Some("soon".into()),
            ..Default::default()
        };
        assert!(bad.filter().unwrap_err().to_string().contains("30m or 2h"));
        assert_eq!(Matching::default().described(), "every partition");
    }
}
