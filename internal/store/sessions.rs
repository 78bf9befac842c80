//! Session rows: register, heartbeat, reap and delete.

use super::driver::sql;
use std::time::Duration;

use super::{Store, get, ms};
use crate::Result;
use crate::ids::SessionId;

/// What a heartbeat records of its processor's work.
#[derive(Debug, Default)]
pub(crate) struct Beat {
    /// The rate it holds itself to after throttle answers; 0 = none.
    pub send_rate: i64,
    /// Its last five minutes.
    pub figures: crate::recent::Figures,
}

impl Store {
    /// Registers a session row for a starting processor; `max_partitions`
    /// is its cap, so that others can take up the share it cannot. A row
    /// of the same id is kept: ids are random, so it is this session's own,
    /// from an earlier try that committed after its caller stopped waiting.
    pub(crate) async fn register_session(
        &self,
        id: &SessionId,
        hostname: &str,
        pid: u32,
        max_partitions: Option<usize>,
    ) -> Result<()> {
        let again = self.driver.upsert("id", &["heartbeat_at"]);
        self.run(sql!(self.driver;
            "INSERT INTO feed_processors (id, hostname, pid, software_version, max_partitions, started_at, heartbeat_at) \
             VALUES (" {id} ", " {hostname} ", " {i64::from(pid)} ", " {env!("CARGO_PKG_VERSION")} ", " {max_partitions.map(|n| n as i64)} ", {now}, {now})" [&again]
        ))
        .await?;
        Ok(())
    }

    /// Heartbeats a session, recording the rate it holds itself to after
    /// throttle answers (0: none) and its last five minutes, why its
    /// dispatch holds off, for how
    /// long (None: it does not) and its cap (`--max-partitions`, or 0
    /// while it gives its partitions back, so that the others' shares
    /// cover them); false when the row is gone (the session was declared
    /// dead and every lease it had is lost).
    pub(crate) async fn heartbeat(
        &self,
        id: &SessionId,
        beat: &Beat,
        held: Option<(&str, Duration)>,
        cap: Option<usize>,
    ) -> Result<bool> {
        let rate = (beat.send_rate > 0).then_some(beat.send_rate as f64);
        let figures = serde_json::to_string(&beat.figures).ok();
        let (reason, held_for) = held.map_or((None, None), |(r, d)| (Some(r), Some(ms(d))));
        let n = self
            .run(sql!(self.driver;
                "UPDATE feed_processors SET heartbeat_at = {now}, send_rate = " {rate} ", \
                     held_reason = " {reason} ", held_since = {now} - " {held_for} ", \
                     max_partitions = " {cap.map(|n| n as i64)} ", figures = " {figures} " WHERE id = " {id}
            ))
            .await?;
        Ok(n == 1)
    }

    /// How many live sessions other than `me` dispatch (none of their
    /// dispatch held off): those that would take the partitions `me`
    /// gives back.
    pub(crate) async fn dispatching_peers(&self, me: &SessionId, expiry: Duration) -> Result<i64> {
        let rows = self
            .fetch(sql!(self.driver;
                "SELECT COUNT(*) AS n FROM feed_processors WHERE heartbeat_at >= {now} - " {ms(expiry)}
                " AND held_reason IS NULL AND id <> " {me}
            ))
            .await?;
        rows.first().map_or(Ok(0), |r| get(r, "n"))
    }

    /// Deletes sessions silent for longer than `expiry`.
    pub(crate) async fn reap_sessions(&self, expiry: Duration) -> Result<u64> {
        self.run(sql!(self.driver; "DELETE FROM feed_processors WHERE heartbeat_at < {now} - " {ms(expiry)}))
        .await
    }

    /// Deletes a session row (graceful shutdown).
    pub(crate) async fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.run(sql!(self.driver; "DELETE FROM feed_processors WHERE id = " {id}))
            .await?;
        Ok(())
    }
}
