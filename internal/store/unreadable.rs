//! Rows Feed cannot read: an item written with plain SQL may hold a value
//! of the wrong type (SQLite keeps text in an INTEGER column, a BLOB in a
//! text one). Dispatch decodes row by row so that such a row costs only
//! itself: a bad optional field is ignored with a warning, and an item
//! whose fence cannot be read is failed with a `last_error` that says so.

use sea_orm::{QueryResult, TryGetable, Value};

use super::driver::sql;
use super::{Fence, ReadyItem, Store, get};
use crate::Result;
use crate::ids::{ItemId, PartitionId, SessionId};
use crate::printable::printable;

/// Characters of a bad value quoted in a message at most.
const QUOTED: usize = 40;

/// A ready row that could not be decoded whole.
#[derive(Debug)]
pub(crate) struct Unreadable {
    /// The row's id and partition, when they can be read: the item can be
    /// failed. Without them it is only passed over.
    pub target: Option<(Value, PartitionId)>,
    /// What cannot be read, e.g. "attempts is 'many', not an integer".
    pub why: String,
}

/// Decodes one row of the ready-items read. A `traceparent` that is not
/// text is ignored with a warning; any other field that cannot be read
/// makes the row [`Unreadable`].
pub(crate) fn ready_item(r: &QueryResult) -> std::result::Result<ReadyItem, Unreadable> {
    let partition_id: PartitionId = get(r, "partition_id").map_err(|_| Unreadable {
        target: None,
        why: format!("partition_id is {}, not text", describe(r, "partition_id")),
    })?;
    let (id, target) = match get::<ItemId>(r, "id") {
        Ok(id) => (id.clone(), Value::from(id.as_str())),
        Err(_) => {
            let why = format!("id is {}, not text", describe(r, "id"));
            let target = get::<Vec<u8>>(r, "id")
                .ok()
                .map(|b| (Value::Bytes(Some(b)), partition_id.clone()));
            return Err(Unreadable { target, why });
        }
    };
    let bad = |why: String| Unreadable {
        target: Some((target.clone(), partition_id.clone())),
        why,
    };
    let int = |col: &str| -> std::result::Result<i64, Unreadable> {
        get::<i64>(r, col)
            .map_err(|_| bad(format!("{col} is {}, not an integer", describe(r, col))))
    };
    let small = |col: &str| -> std::result::Result<i32, Unreadable> {
        get::<i32>(r, col)
            .map_err(|_| bad(format!("{col} is {}, not an integer", describe(r, col))))
    };
    let fence = Fence {
        gate: int("gate")?,
        version: int("version")?,
        attempts: small("attempts")?,
        steps: small("steps")?,
        id,
        partition_id: partition_id.clone(),
    };
    let data = get::<Vec<u8>>(r, "data")
        .map_err(|_| bad(format!("data is {}, not bytes", describe(r, "data"))))?;
    let seq = int("seq")?;
    let traceparent = match get::<Option<String>>(r, "traceparent") {
        Ok(t) => t,
        Err(_) => {
            tracing::warn!(
                partition = %fence.partition_id, item = %fence.id,
                value = %describe(r, "traceparent"),
                "an item's traceparent is not text; it is ignored"
            );
            None
        }
    };
    Ok(ReadyItem {
        fence,
        data,
        seq,
        // Not null, even if not an integer: read by its due time.
        scheduled: !matches!(get::<Option<i64>>(r, "not_before"), Ok(None)),
        traceparent,
        waited: waited(r),
        read: std::time::Instant::now(),
    })
}

/// How long a ready row had been ready when read: from the last of its
/// write, its due time and its gate's opening, to the read (all on the
/// database clock). None when one of them is not an integer (written by
/// hand): the row is still delivered, its wait is not counted.
fn waited(r: &QueryResult) -> Option<std::time::Duration> {
    let read_at = get::<i64>(r, "read_at").ok()?;
    let written = get::<i64>(r, "updated_at").ok()?;
    let due = get::<Option<i64>>(r, "not_before").ok()?.unwrap_or(0);
    let opened = get::<i64>(r, "gate_at").ok()?;
    let since = written.max(due).max(opened);
    Some(std::time::Duration::from_millis(
        (read_at - since).max(0) as u64
    ))
}

/// A column's value as the message shows it: quoted text (cut short and
/// escaped), a BLOB's length, or a number.
pub(crate) fn describe(r: &QueryResult, col: &str) -> String {
    if let Ok(Some(s)) = get::<Option<String>>(r, col) {
        let cut: String = s.chars().take(QUOTED).collect();
        let more = if cut.len() < s.len() { "…" } else { "" };
        return format!("'{}{more}'", printable(&cut));
    }
    if let Ok(Some(b)) = get::<Option<Vec<u8>>>(r, col) {
        return format!("a BLOB of {} bytes", b.len());
    }
    if let Ok(Some(f)) = get::<Option<f64>>(r, col) {
        return f.to_string();
    }
    if let Ok(None) = <Option<i64> as TryGetable>::try_get(r, "", col) {
        return "NULL".into();
    }
    "a value of another type".into()
}

impl Store {
    /// Fails the available items of a partition `me` holds whose gate is
    /// not an integer (SQLite only: the other backends refuse one), each
    /// with a `last_error` that names the gate's type; returns how many.
    pub(crate) async fn fail_unreadable_gates(
        &self,
        me: &SessionId,
        partition: &PartitionId,
    ) -> Result<u64> {
        let message = "'the row cannot be read: gate is a ' || typeof(gate) || ' value, not an integer; \
                       fix the row with SQL and run `processor retry`'";
        self.run(sql!(self.driver;
            "UPDATE feed_items SET status = 'failed', last_error = " [message]
            ", version = version + 1, updated_at = {now} WHERE partition_id = " {partition}
            " AND status = 'available' AND typeof(gate) <> 'integer' AND EXISTS \
             (SELECT 1 FROM feed_partitions p WHERE p.id = " {partition} " AND p.owner = " {me} ")"
        ))
        .await
    }

    /// Fails an available item whose row cannot be read, in a partition
    /// `me` holds, naming what cannot be read and what to do; true when
    /// it was failed. Only that row (by id and partition) is written.
    pub(crate) async fn fail_unreadable(&self, me: &SessionId, bad: &Unreadable) -> Result<bool> {
        let Some((id, partition)) = &bad.target else {
            return Ok(false);
        };
        let message = super::sanitize_error(&format!(
            "the row cannot be read: {}; fix the row with SQL and run `processor retry`",
            bad.why
        ));
        let n = self
            .run(sql!(self.driver;
                "UPDATE feed_items SET status = 'failed', last_error = " {message}
                ", version = version + 1, updated_at = {now} WHERE id = " {id.clone()}
                " AND partition_id = " {partition} " AND status = 'available' AND EXISTS \
                 (SELECT 1 FROM feed_partitions p WHERE p.id = " {partition} " AND p.owner = " {me} ")"
            ))
            .await?;
        Ok(n == 1)
    }
}
