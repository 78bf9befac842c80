//! A schedule's partition settings as JSON: stored in `feed_schedules.spec`
//! and sent as `partition` to `PUT /api/v1/schedules/{name}`.

use serde::{Deserialize, Serialize};

use super::Recurring;
use crate::ids::Tenant;
use crate::store::{OnFailure, PartitionSpec, ScheduleRow};
use crate::{Error, Result};

/// [`PartitionSpec`]'s fields, each optional (left out: its default).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Options {
    /// `tenant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `auto_close` (true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_close: Option<bool>,
    /// `manual_checkpoint` (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_checkpoint: Option<bool>,
    /// `on_failure`: `block` or `continue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    /// `gate_events` (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_events: Option<bool>,
    /// `weight`, 1 to 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// `max_in_flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// `priority`, -1000 to 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

impl Options {
    /// The settings these options give, checked.
    pub fn spec(&self) -> Result<PartitionSpec> {
        let mut spec = PartitionSpec::default();
        if let Some(t) = &self.tenant {
            crate::validate::id("tenant", t)?;
            spec.tenant = Some(Tenant::from(t.as_str()));
        }
        spec.auto_close = self.auto_close.unwrap_or(spec.auto_close);
        spec.manual_checkpoint = self.manual_checkpoint.unwrap_or(false);
        spec.on_failure = match self.on_failure.as_deref() {
            None | Some("block") => OnFailure::Block,
            Some("continue") => OnFailure::Continue,
            Some(other) => {
                return Err(Error::Invalid(format!(
                    "on_failure {:?}: write \"block\" or \"continue\"",
                    crate::validate::shown(other)
                )));
            }
        };
        spec.gate_events = self.gate_events.unwrap_or(false);
        if let Some(w) = self.weight.filter(|w| !(1..=1000).contains(w)) {
            return Err(Error::Invalid(format!("weight {w}: write 1 to 1000")));
        }
        spec.weight = self.weight;
        if self.max_in_flight == Some(0) {
            return Err(Error::Invalid("max_in_flight 0: write 1 or more".into()));
        }
        spec.max_in_flight = self.max_in_flight;
        spec.priority = self.priority.unwrap_or(0);
        crate::validate::priority(spec.priority)?;
        Ok(spec)
    }

    /// The options that give `spec`.
    pub fn of(spec: &PartitionSpec) -> Options {
        Options {
            tenant: spec.tenant.as_ref().map(ToString::to_string),
            auto_close: Some(spec.auto_close),
            manual_checkpoint: Some(spec.manual_checkpoint),
            on_failure: Some(spec.on_failure.as_str().into()),
            gate_events: Some(spec.gate_events),
            weight: spec.weight,
            max_in_flight: spec.max_in_flight,
            priority: Some(spec.priority),
        }
    }

    /// A stored schedule's options (a row written by hand that does not
    /// read says why).
    pub fn stored(row: &ScheduleRow) -> Result<Options> {
        serde_json::from_str(&row.spec).map_err(|e| {
            Error::Invalid(format!("schedule {}: its spec is not valid: {e}", row.name))
        })
    }
}

/// The row that stores `r`, its next tick `next_tick`.
pub(super) fn row(r: &Recurring, next_tick: i64) -> Result<ScheduleRow> {
    let spec = serde_json::to_string(&Options::of(&r.spec))
        .map_err(|e| Error::Invalid(format!("schedule {}: {e}", r.name)))?;
    Ok(ScheduleRow {
        name: r.name.clone(),
        cron: r.cron.clone(),
        timezone: r.timezone.clone(),
        spec,
        items: r.items.clone(),
        backfill: i32::try_from(r.backfill).unwrap_or(1),
        next_tick,
        last_partition: None,
        last_error: None,
        updated_at: next_tick,
    })
}
