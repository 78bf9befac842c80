//! The ticker every processor runs: twice a second it reads the schedules
//! whose next tick has come (database clock), creates each due tick's
//! partition unless it exists, and moves the schedule on from the tick it
//! read. Processors that race create each partition once and move each
//! schedule once; a processor that dies between the two leaves the tick
//! to the next one, which finds the partition there.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Cadence, Options, partition_id, template};
use crate::store::{ScheduleRow, Store};
use crate::{Error, Result};

/// How often the ticker looks.
const EVERY: Duration = Duration::from_millis(500);

/// A schedule whose expression or settings no longer read waits this long
/// before it is tried again (it is only tried, not created).
const BROKEN_RETRY: i64 = 60_000;

/// Runs the ticker until `cancel`.
pub async fn run(store: Store, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = tick(&store) => if let Err(e) = r {
                static FAILED: crate::ratelog::Every = crate::ratelog::Every::new();
                if let Some(n) = FAILED.due() {
                    tracing::warn!(error = %e, failures = n, "schedules: reading the due ticks failed; trying again");
                }
            },
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// One look: every due schedule's ticks created and the schedule moved on.
pub async fn tick(store: &Store) -> Result<()> {
    let (Some(now), due) = store.due_schedules().await? else {
        return Ok(());
    };
    for row in due {
        create_due(store, &row, now).await?;
    }
    Ok(())
}

/// Creates `row`'s due ticks at `now` and moves it on (from the tick it
/// was read at, so of two processors that read it only one moves it).
/// Errors of the schedule itself are recorded on it; errors of the
/// database are returned.
pub async fn create_due(store: &Store, row: &ScheduleRow, now: i64) -> Result<()> {
    let name = row.name.as_str();
    let cadence = match Cadence::parse(&row.cron, &row.timezone) {
        Ok(c) => c,
        Err(e) => return broken(store, row, now, &e).await,
    };
    let spec = match Options::stored(row).and_then(|o| o.spec()) {
        Ok(s) => s,
        Err(e) => return broken(store, row, now, &e).await,
    };
    let backfill = u32::try_from(row.backfill).unwrap_or(1);
    let (ticks, next) = cadence.due(row.next_tick, now, backfill);
    let (mut last, mut error) = (None, None);
    for at in ticks {
        let id = partition_id(name, at);
        let made = match template(&row.items, &id) {
            Ok(items) => store.create_once(&id, &spec, &items).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(created) => {
                if created {
                    tracing::info!(schedule = name, partition = %id, "schedule created its partition");
                }
                last = Some(id);
                error = None;
            }
            Err(e @ (Error::Invalid(_) | Error::Conflict(_))) => {
                tracing::warn!(schedule = name, partition = %id, error = %e, "schedule's tick created nothing");
                error = Some(crate::store::sanitize_error(&e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    // A schedule that never matches again waits for ever (it is listed).
    let to = next.unwrap_or(i64::MAX);
    store
        .advance_schedule(name, row.next_tick, to, last.as_deref(), error.as_deref())
        .await?;
    Ok(())
}

/// Records why `row` cannot tick and looks again a minute later.
async fn broken(store: &Store, row: &ScheduleRow, now: i64, e: &Error) -> Result<()> {
    tracing::warn!(schedule = %row.name, error = %e, "schedule cannot tick; set it again");
    let why = crate::store::sanitize_error(&e.to_string());
    store
        .advance_schedule(
            &row.name,
            row.next_tick,
            now + BROKEN_RETRY,
            None,
            Some(&why),
        )
        .await?;
    Ok(())
}
