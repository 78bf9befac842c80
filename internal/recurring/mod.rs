//! Recurring partitions (schedules): a cron expression in a time zone, the
//! settings of the partitions it creates and their items. Each tick
//! creates one partition, `<name>-<tick time, RFC 3339 UTC>`, whatever the
//! number of processors: every processor runs the ticker ([`run`]), the
//! partition is created only if it is not there, and the schedule moves to
//! its next tick only from the tick it was read at.
//!
//! Ticks missed while no processor ran: the latest `backfill` of them are
//! created (1 by default: the latest, once), the others skipped.

mod options;
mod ticker;

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

pub use options::Options;
pub use ticker::{create_due, run, tick};

use crate::store::{PartitionSpec, ScheduleRow, Store};
use crate::{Error, Result, lines, validate};

/// The longest schedule name: room is left for `-<tick>` in its
/// partitions' ids (21 bytes, `-2026-11-30T02:00:00Z`).
pub const MAX_NAME_BYTES: usize = validate::MAX_ID_BYTES - 21;

/// Missed ticks a schedule may create at most when it is late.
pub const MAX_BACKFILL: u32 = 1000;

/// A schedule to set.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recurring {
    /// Its name.
    pub name: String,
    /// Cron: 5 fields, or 6 with seconds first (`*/2 * * * * *`).
    pub cron: String,
    /// IANA time zone (`Europe/Paris`); `UTC` by default.
    pub timezone: String,
    /// The settings of each partition.
    pub spec: PartitionSpec,
    /// The items of each partition, as the JSON lines `processor enqueue` reads.
    pub items: String,
    /// Missed ticks to create at most (the latest ones), 1 to [`MAX_BACKFILL`].
    pub backfill: u32,
}

impl Recurring {
    /// A schedule with the default settings: UTC, default partitions, backfill 1.
    pub fn new(name: impl Into<String>, cron: impl Into<String>, items: impl Into<String>) -> Self {
        Recurring {
            name: name.into(),
            cron: cron.into(),
            timezone: "UTC".into(),
            spec: PartitionSpec::default(),
            items: items.into(),
            backfill: 1,
        }
    }
}

/// When a schedule ticks: its cron expression read in its time zone.
#[derive(Clone, Debug)]
pub struct Cadence {
    cron: Cron,
    tz: Tz,
}

impl Cadence {
    /// Reads `cron` in `timezone`, or says what is wrong and what to write.
    pub fn parse(cron: &str, timezone: &str) -> Result<Cadence> {
        let parsed = Cron::new(cron).with_seconds_optional().parse().map_err(|e| {
            Error::Invalid(format!(
                "cron {:?}: {e}; write 5 fields (minute hour day month weekday, as \"0 2 * * *\") \
                 or 6 with seconds first (\"*/2 * * * * *\")",
                validate::shown(cron)
            ))
        })?;
        let tz = Tz::from_str(timezone).map_err(|_| {
            Error::Invalid(format!(
                "time zone {:?} is not an IANA time zone; write one such as \"UTC\" or \"Europe/Paris\"",
                validate::shown(timezone)
            ))
        })?;
        Ok(Cadence { cron: parsed, tz })
    }

    /// The first tick strictly after `ms` (epoch milliseconds); None when
    /// the expression never matches again.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let at = self.tz.timestamp_millis_opt(ms).single()?;
        let next = self.cron.find_next_occurrence(&at, false).ok()?;
        Some(next.timestamp_millis())
    }

    /// The ticks due at `now` for a schedule whose next tick is `next`
    /// (the latest `backfill` of them), and the tick after `now`.
    pub fn due(&self, next: i64, now: i64, backfill: u32) -> (Vec<i64>, Option<i64>) {
        let keep = usize::try_from(backfill.max(1)).unwrap_or(1);
        let mut ticks = std::collections::VecDeque::with_capacity(keep);
        let mut at = Some(next);
        while let Some(t) = at.filter(|&t| t <= now) {
            if ticks.len() == keep {
                ticks.pop_front();
            }
            ticks.push_back(t);
            at = self.next_after(t);
        }
        (ticks.into(), at)
    }
}

/// The id of the partition a schedule's tick creates.
pub fn partition_id(name: &str, tick_ms: i64) -> String {
    let at = Utc
        .timestamp_millis_opt(tick_ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    format!("{name}-{}", at.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// Checks `r` and stores it, its first tick the first after now (database
/// clock); answers the row as stored.
pub async fn set(store: &Store, r: &Recurring) -> Result<ScheduleRow> {
    validate::id("schedule name", &r.name)?;
    if r.name.len() > MAX_NAME_BYTES {
        return Err(Error::Invalid(format!(
            "schedule name {:?} is longer than {MAX_NAME_BYTES} bytes: its partitions' ids add the tick time",
            validate::shown(&r.name)
        )));
    }
    if !(1..=MAX_BACKFILL).contains(&r.backfill) {
        return Err(Error::Invalid(format!(
            "backfill {} is out of range: create 1 to {MAX_BACKFILL} missed ticks",
            r.backfill
        )));
    }
    let cadence = Cadence::parse(&r.cron, &r.timezone)?;
    // The template is read as each tick will read it, with the longest id.
    let longest = partition_id(&r.name, 253_402_300_799_000);
    template(&r.items, &longest)?;
    let now = store.now_ms().await?;
    let next_tick = cadence.next_after(now).ok_or_else(|| {
        Error::Invalid(format!(
            "cron {:?} never matches again",
            validate::shown(&r.cron)
        ))
    })?;
    let row = options::row(r, next_tick)?;
    store.put_schedule(&row).await?;
    tracing::info!(schedule = %r.name, cron = %r.cron, timezone = %r.timezone, next_tick, "schedule set");
    Ok(row)
}

/// The items of partition `partition` from a schedule's JSON lines: each
/// id given becomes `<partition>/<id>`, so that an item's id alone says
/// which tick made it (every tick makes the same items).
pub fn template(items: &str, partition: &str) -> Result<Vec<crate::store::NewItem>> {
    let read = lines::read(items.as_bytes(), false, || {})?;
    read.into_iter()
        .map(|(n, mut item)| {
            if let Some(id) = item.id.take() {
                let id = format!("{partition}/{id}");
                validate::id("item id", &id).map_err(|e| {
                    Error::Invalid(format!(
                        "line {n}: {e} (a tick's items are named <partition>/<id>)"
                    ))
                })?;
                item.id = Some(id);
            }
            Ok(item)
        })
        .collect()
}

#[cfg(test)]
mod tests;
