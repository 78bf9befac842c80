//! How fast work goes now, fleet-wide: results per second over the last
//! 1, 5 and 15 minutes, from the per-minute counts processors add to
//! `feed_completions` as they write results (16 rows read, whatever the
//! throughput).

use sea_orm::FromQueryResult;
use serde::Serialize;

use super::Store;
use super::driver::sql;
use crate::Result;

/// Results per second over one window. The JSON form is stable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Rates {
    /// Items completed.
    pub completed: f64,
    /// Attempts that failed and will be retried.
    pub retried: f64,
    /// Items failed for good.
    pub failed: f64,
}

/// Results per second over the last 1, 5 and 15 minutes, each window
/// ending now (database clock). The JSON form is stable: fields are only
/// added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Throughput {
    /// The last minute.
    pub last_1m: Rates,
    /// The last 5 minutes.
    pub last_5m: Rates,
    /// The last 15 minutes.
    pub last_15m: Rates,
}

/// One minute's counts.
#[derive(FromQueryResult)]
struct Minute {
    minute: i64,
    items: i64,
    retried: i64,
    failed: i64,
}

impl Store {
    /// The fleet's throughput now.
    pub async fn throughput(&self) -> Result<Throughput> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT {now} AS now, minute, items, retried, failed FROM feed_completions \
                 WHERE minute >= {now} - 960000 ORDER BY minute"
            ))
            .await?;
        let mut now = None;
        let mut minutes = Vec::with_capacity(rows.len());
        for r in &rows {
            now = Some(super::get::<i64>(r, "now")?);
            minutes.push(Minute::from_query_result(r, "")?);
        }
        let Some(now) = now else {
            return Ok(Throughput::default());
        };
        Ok(Throughput {
            last_1m: rates(&minutes, now, 1),
            last_5m: rates(&minutes, now, 5),
            last_15m: rates(&minutes, now, 15),
        })
    }
}

/// Results per second over the `n` minutes before `now`: the minutes
/// inside the window whole, the one it starts in by the share of it the
/// window covers (results taken as even within a minute).
fn rates(minutes: &[Minute], now: i64, n: i64) -> Rates {
    let start = now - n * 60_000;
    let mut sum = [0.0; 3];
    for m in minutes.iter().filter(|m| m.minute + 60_000 > start) {
        let share = if m.minute < start {
            (m.minute + 60_000 - start) as f64 / 60_000.0
        } else {
            1.0
        };
        for (s, v) in sum.iter_mut().zip([m.items, m.retried, m.failed]) {
            *s += v as f64 * share;
        }
    }
    let seconds = (n * 60) as f64;
    Rates {
        completed: sum[0] / seconds,
        retried: sum[1] / seconds,
        failed: sum[2] / seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_takes_its_first_minute_by_share() {
        let m = |minute, items| Minute {
            minute,
            items,
            retried: 0,
            failed: items / 10,
        };
        // Now is 30 s into minute 10; the last minute is the second half
        // of minute 9 and the first half of minute 10.
        let minutes = [m(8 * 60_000, 600), m(9 * 60_000, 1200), m(10 * 60_000, 300)];
        let now = 10 * 60_000 + 30_000;
        let one = rates(&minutes, now, 1);
        assert_eq!(one.completed, (600.0 + 300.0) / 60.0);
        assert_eq!(one.failed, (60.0 + 30.0) / 60.0);
        let five = rates(&minutes, now, 5);
        assert_eq!(five.completed, (600.0 + 1200.0 + 300.0) / 300.0);
    }
}
