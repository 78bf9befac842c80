//! The retry policy: what a handler's outcome does to an item. A pure
//! function of the settings, the delivered item and the outcome, so every
//! path that must record an attempt (an answer, a refused write, a
//! panicked delivery) records it the same way.

use std::sync::Arc;
use std::time::Duration;

use crate::backoff;
use crate::config::Policy;
use crate::handler::{Child, Ending, Outcome, PartitionEnd};
use crate::status::Status;
use crate::store::{Fence, ItemWrite, NewItem, sanitize_error};
use crate::validate::MAX_ID_BYTES;

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// The wait before an item's next step at the same gate grows by this
/// much per step taken there, up to [`STEP_FLOOR_MAX`]: a handler that
/// answers "not done" every time cannot make dispatch loop on an item.
const STEP_FLOOR: Duration = Duration::from_millis(10);
/// The longest wait between two steps of an item.
const STEP_FLOOR_MAX: Duration = Duration::from_secs(1);

/// What a result did, the `outcome` label of `feed_items_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// The item reached its terminal state.
    Done,
    /// The item moved to a next step (same or later gate).
    Stepped,
    /// A failed attempt that will be retried after a backoff.
    Retried,
    /// The item failed for good.
    Failed,
    /// The result was not stored: stale, or this session was no longer live.
    Rejected,
}

impl Label {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Done => "done",
            Label::Stepped => "stepped",
            Label::Retried => "retried",
            Label::Failed => "failed",
            Label::Rejected => "rejected",
        }
    }
}

impl Policy {
    /// The item's next state for an outcome, with its label; None when the
    /// handler was unreachable (nothing is written, no attempt is counted).
    pub fn decide(&self, item: &Fence, outcome: Outcome) -> Option<(ItemWrite, Label)> {
        let attempt = u32::try_from(item.attempts).unwrap_or(0) + 1;
        let attempts = i32::try_from(attempt).unwrap_or(i32::MAX);
        // A failed attempt at the item's gate: final (a new step, so the
        // version moves) or retried after `delay` (same step, same key).
        let attempt_failed = |message: String, delay: Option<Duration>| ItemWrite {
            status: if delay.is_some() {
                Status::Available
            } else {
                Status::Failed
            },
            gate: item.gate,
            data: None,
            attempts,
            steps: item.steps,
            last_error: Some(sanitize_error(&message)),
            delay,
            new_step: delay.is_none(),
            ends: None,
            spawned: None,
        };
        let failed = |message: String| Some((attempt_failed(message, None), Label::Failed));
        match outcome {
            Outcome::Unreachable { .. } => None,
            Outcome::Step { gate, .. } if gate.is_some_and(|g| g < item.gate) => failed(format!(
                "handler answered gate {}, below the partition's gate {}: an item cannot go back \
                 to an earlier gate, so it could never run again",
                gate.unwrap_or_default(),
                item.gate
            )),
            Outcome::Step {
                data,
                ending: Some(Ending { end, reason }),
                ..
            } => {
                // The partition ends now: the item with it, done (failed
                // when the partition fails), at its gate.
                let says = reason.map_or(String::new(), |r| format!(": {r}"));
                let failed = end == PartitionEnd::Fail;
                let w = ItemWrite {
                    status: if failed {
                        Status::Failed
                    } else {
                        Status::Complete
                    },
                    gate: item.gate,
                    data,
                    attempts,
                    steps: item.steps,
                    last_error: Some(sanitize_error(&format!(
                        "the handler ended its partition ({}){says}",
                        end.as_str()
                    ))),
                    delay: None,
                    new_step: true,
                    ends: Some(end),
                    spawned: None,
                };
                Some((w, if failed { Label::Failed } else { Label::Done }))
            }
            Outcome::Step { gate, done, .. }
                if !done
                    && gate.is_none_or(|g| g == item.gate)
                    && self.max_steps != 0
                    && u32::try_from(item.steps).unwrap_or(0) + 1 >= self.max_steps =>
            {
                failed(format!(
                    "handler answered done:false {} times in a row at gate {} (--max-steps {}): \
                     answer \"done\": true when the item is finished, or raise --max-steps",
                    self.max_steps, item.gate, self.max_steps
                ))
            }
            Outcome::Step {
                gate,
                done,
                data,
                children,
                ..
            } => {
                let spawned = match spawned(item, children) {
                    Ok(items) => items,
                    Err(message) => return self.decide(item, Outcome::retry(message)),
                };
                let gate = gate.unwrap_or(item.gate);
                // Another step at the same gate waits a little longer each time.
                let steps = if !done && gate == item.gate {
                    item.steps.saturating_add(1)
                } else if done {
                    item.steps
                } else {
                    0
                };
                let floor = (!done && gate == item.gate).then(|| {
                    STEP_FLOOR
                        .saturating_mul(u32::try_from(steps).unwrap_or(u32::MAX))
                        .min(STEP_FLOOR_MAX)
                });
                let w = ItemWrite {
                    status: if done {
                        Status::Complete
                    } else {
                        Status::Available
                    },
                    gate,
                    data,
                    attempts: if done { attempts } else { 0 },
                    steps,
                    last_error: None,
                    delay: floor,
                    new_step: true,
                    ends: None,
                    spawned,
                };
                Some((w, if done { Label::Done } else { Label::Stepped }))
            }
            Outcome::Failed {
                message,
                retry: false,
                ..
            } => failed(format!("{message} (not retried)")),
            Outcome::Failed { message, .. }
                if self.max_attempts != 0 && attempt >= self.max_attempts =>
            {
                failed(format!(
                    "{message} (attempt {attempt} of {}; no attempts left)",
                    self.max_attempts
                ))
            }
            Outcome::Failed {
                message,
                retry_after,
                ..
            } => {
                // Retry-After is honoured, but never below the backoff
                // base: `Retry-After: 0` must not make a retry loop hot.
                let delay = retry_after
                    .map(|d| d.clamp(self.backoff_base, MAX_RETRY_AFTER.max(self.backoff_base)))
                    .unwrap_or_else(|| self.delay(attempt));
                Some((attempt_failed(message, Some(delay)), Label::Retried))
            }
        }
    }

    /// The backoff after attempt `attempt`.
    pub fn delay(&self, attempt: u32) -> Duration {
        backoff::delay(self.backoff_base, self.backoff_max, attempt)
    }
}

/// The items an answer spawns, as they are inserted: each at or above
/// the answering item's gate (its gate when none is given), named
/// `<item id>:<version>/<n>` when it has no id (the answering step, within
/// the partition), and its parent recorded.
/// Err says which child is wrong and why.
fn spawned(item: &Fence, children: Vec<Child>) -> Result<Option<Arc<[NewItem]>>, String> {
    if children.is_empty() {
        return Ok(None);
    }
    let key = format!("{}:{}", item.id, item.version);
    let mut out = Vec::with_capacity(children.len());
    for (n, child) in children.into_iter().enumerate() {
        let gate = child.gate.unwrap_or(item.gate);
        if gate < item.gate {
            return Err(format!(
                "handler answered items[{n}] with gate {gate}, below the answering item's gate {}: \
                 it could never run; give it gate {} or higher (or leave the gate out)",
                item.gate, item.gate
            ));
        }
        let id = child.id.unwrap_or_else(|| format!("{key}/{n}"));
        if id.len() > MAX_ID_BYTES {
            return Err(format!(
                "items[{n}] of the answer would be named {:?}, longer than {MAX_ID_BYTES} bytes: \
                 give the spawned items ids",
                crate::validate::shown(&id)
            ));
        }
        let mut new = NewItem::new(child.data).with_id(id);
        new.gate = Some(gate);
        new.parent = Some(item.id.to_string());
        out.push(new);
    }
    Ok(Some(out.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32) -> Policy {
        Policy {
            max_attempts,
            max_steps: 4,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }

    fn item(gate: i64, attempts: i32) -> Fence {
        Fence {
            id: "i".into(),
            partition_id: "p".into(),
            gate,
            version: 3,
            attempts,
            steps: 0,
        }
    }

    fn fail(retry: bool, retry_after: Option<Duration>) -> Outcome {
        let failed = if retry {
            Outcome::retry("boom")
        } else {
            Outcome::fail("boom")
        };
        match retry_after {
            Some(d) => failed.after(d),
            None => failed,
        }
    }

    fn step(gate: Option<i64>, done: bool, data: Option<&[u8]>) -> Outcome {
        Outcome::step(gate, done, data.map(bytes::Bytes::copy_from_slice))
    }

    #[test]
    fn steps() {
        let p = policy(5);
        let (w, l) = p.decide(&item(1, 2), step(Some(4), false, None)).unwrap();
        assert_eq!(l, Label::Stepped);
        assert_eq!(
            (w.status, w.gate, w.attempts, w.new_step),
            (Status::Available, 4, 0, true)
        );
        let (w, l) = p.decide(&item(1, 0), step(None, true, Some(b"x"))).unwrap();
        assert_eq!(l, Label::Done);
        assert_eq!((w.status, w.gate, w.attempts), (Status::Complete, 1, 1));
        assert_eq!(w.data.as_deref(), Some(&b"x"[..]));
        let (w, l) = p.decide(&item(2, 0), step(Some(1), false, None)).unwrap();
        assert_eq!((l, w.status), (Label::Failed, Status::Failed));
        assert!(
            w.last_error
                .unwrap()
                .contains("below the partition's gate 2")
        );
    }

    #[test]
    fn steps_at_one_gate_are_spaced_and_bounded() {
        let p = policy(5);
        let at = |steps| Fence {
            steps,
            ..item(1, 0)
        };
        let (w, l) = p.decide(&at(0), step(None, false, None)).unwrap();
        assert_eq!((l, w.steps, w.delay), (Label::Stepped, 1, Some(STEP_FLOOR)));
        let (w, _) = p.decide(&at(2), step(Some(1), false, None)).unwrap();
        assert_eq!((w.steps, w.delay), (3, Some(STEP_FLOOR * 3)));
        // The fourth "not done" in a row at one gate fails the item.
        let (w, l) = p.decide(&at(3), step(None, false, None)).unwrap();
        assert_eq!((l, w.status), (Label::Failed, Status::Failed));
        assert!(
            w.last_error
                .unwrap()
                .contains("done:false 4 times in a row at gate 1")
        );
        // A later gate starts the count again, with no wait; done keeps it.
        let (w, _) = p.decide(&at(3), step(Some(2), false, None)).unwrap();
        assert_eq!((w.steps, w.delay, w.gate), (0, None, 2));
        let (w, l) = p.decide(&at(3), step(None, true, None)).unwrap();
        assert_eq!((l, w.steps, w.delay), (Label::Done, 3, None));
        // 0 = unlimited; the wait stops growing at its maximum.
        let free = Policy { max_steps: 0, ..p };
        let (w, l) = free.decide(&at(100_000), step(None, false, None)).unwrap();
        assert_eq!((l, w.delay), (Label::Stepped, Some(STEP_FLOOR_MAX)));
    }

    #[test]
    fn failures() {
        let p = policy(3);
        let (w, l) = p.decide(&item(0, 0), fail(true, None)).unwrap();
        assert_eq!(
            (l, w.status, w.attempts, w.new_step),
            (Label::Retried, Status::Available, 1, false)
        );
        let d = w.delay.unwrap();
        assert!(d >= Duration::from_millis(500) && d <= Duration::from_secs(1));
        assert_eq!(w.last_error.as_deref(), Some("boom"));
        let (w, l) = p.decide(&item(0, 2), fail(true, None)).unwrap();
        assert_eq!((l, w.attempts), (Label::Failed, 3));
        assert_eq!(
            w.last_error.as_deref(),
            Some("boom (attempt 3 of 3; no attempts left)")
        );
        let (w, l) = p.decide(&item(0, 0), fail(false, None)).unwrap();
        assert_eq!(l, Label::Failed);
        assert_eq!(w.last_error.as_deref(), Some("boom (not retried)"));
        let (w, _) = p
            .decide(&item(0, 0), fail(true, Some(Duration::from_secs(999_999))))
            .unwrap();
        assert_eq!(w.delay, Some(MAX_RETRY_AFTER));
        // 0 = unlimited attempts.
        let (_, l) = policy(0).decide(&item(0, 1_000), fail(true, None)).unwrap();
        assert_eq!(l, Label::Retried);
        assert!(
            p.decide(
                &item(0, 0),
                Outcome::Unreachable {
                    message: "down".into()
                }
            )
            .is_none()
        );
    }
}
