//! One lifecycle for every long-lived task of a processor: each is started
//! in a group ([`Tasks`]) under a name, is handed the group's stop token,
//! returns once it is cancelled, and is waited for when the group stops.
//! Nothing is spawned and forgotten, so a stopped processor has no task
//! left writing to the database.
//!
//! A task that panics is a bug the processor cannot reason about: the
//! panic is recorded, the processor shuts down as at a signal (bounded),
//! and `run` returns [`Error::Panicked`](crate::Error::Panicked), so that
//! the process exits non-zero and a supervisor restarts it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// A group of tasks stopped together: one stop token, one tracker.
#[derive(Clone, Debug)]
pub(crate) struct Tasks {
    stop: CancellationToken,
    tracker: TaskTracker,
    fault: Arc<Fault>,
}

/// The first panic of a task, shared by groups started [`Tasks::beside`]
/// one another.
#[derive(Debug)]
struct Fault {
    first: OnceLock<(&'static str, String)>,
    /// Cancelled at a panic: the first group's stop token, which ends the processor.
    alarm: CancellationToken,
}

impl Default for Tasks {
    fn default() -> Self {
        let stop = CancellationToken::new();
        Tasks {
            fault: Arc::new(Fault {
                first: OnceLock::new(),
                alarm: stop.clone(),
            }),
            stop,
            tracker: TaskTracker::new(),
        }
    }
}

/// Test hook: with `FEED_TEST_PANIC_TASK=<name>` in its environment, the
/// processor's task of that name (`dispatch`, `keeper`, `webhooks`…)
/// panics as it starts, so that tests can see what a panic does.
const PANIC_HOOK: &str = "FEED_TEST_PANIC_TASK";

fn panic_if_asked(name: &str) {
    static ASKED: OnceLock<Option<String>> = OnceLock::new();
    let asked = ASKED.get_or_init(|| std::env::var(PANIC_HOOK).ok());
    if asked.as_deref() == Some(name) {
        panic!("{PANIC_HOOK}={name}: a test asked this task to panic");
    }
}

/// A panic's message.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

impl Tasks {
    /// Another group (stopped on its own) whose panics end the processor
    /// as this group's do.
    pub(crate) fn beside(&self) -> Tasks {
        Tasks {
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            fault: self.fault.clone(),
        }
    }

    /// The task that panicked first, and its message, if one did.
    pub(crate) fn panicked(&self) -> Option<(&'static str, String)> {
        self.fault.first.get().cloned()
    }

    /// The token every task of the group watches.
    pub(crate) fn token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts `task` in the group, inside a `task` span named `name`. If
    /// it panics, the panic is recorded and the processor stops; its
    /// handle still sees the panic.
    pub(crate) fn spawn<F>(&self, name: &'static str, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let fault = self.fault.clone();
        let task = async move {
            let run = AssertUnwindSafe(async move {
                panic_if_asked(name);
                task.await
            });
            match run.catch_unwind().await {
                Ok(v) => v,
                Err(panic) => {
                    let text = message(panic.as_ref());
                    tracing::error!(task = name, panic = %text, "a task panicked: the processor stops");
                    let _ = fault.first.set((name, text));
                    fault.alarm.cancel();
                    std::panic::resume_unwind(panic)
                }
            }
        };
        self.tracker
            .spawn(task.instrument(tracing::debug_span!("task", name)))
    }

    /// Tells every task of the group to stop (they finish what they are doing).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Stops the group and waits for its tasks, up to `bound`; false when
    /// some were still running then (they are left to end on their own).
    pub(crate) async fn stopped(&self, bound: Duration) -> bool {
        self.stop();
        self.tracker.close();
        tokio::time::timeout(bound, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_group_waits_for_its_tasks_to_finish() {
        let tasks = Tasks::default();
        let cleaned = Arc::new(AtomicBool::new(false));
        let (token, done) = (tasks.token(), cleaned.clone());
        tasks.spawn("worker", async move {
            token.cancelled().await;
            tokio::task::yield_now().await;
            done.store(true, Ordering::SeqCst);
        });
        assert!(tasks.stopped(Duration::from_secs(5)).await);
        assert!(
            cleaned.load(Ordering::SeqCst),
            "waited for the task's last step"
        );
    }

    #[tokio::test]
    async fn a_panic_in_either_group_stops_the_first_and_is_kept() {
        let work = Tasks::default();
        let session = work.beside();
        let handle = session.spawn("keeper", async { panic!("boom") });
        assert!(handle.await.unwrap_err().is_panic());
        assert!(work.token().is_cancelled(), "the processor stops");
        assert!(
            !session.token().is_cancelled(),
            "the group stops later, as usual"
        );
        assert_eq!(work.panicked(), Some(("keeper", "boom".to_string())));
        assert!(work.stopped(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn a_task_that_ignores_the_stop_is_given_up_on() {
        let tasks = Tasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn("stuck", async move {
            let _ = rx.await;
        });
        assert!(!tasks.stopped(Duration::from_millis(50)).await);
        drop(tx);
    }
}
