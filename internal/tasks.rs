//! One lifecycle for every long-lived task of a processor: each is started
//! in a group ([`Tasks`]) under a name, is handed the group's stop token,
//! returns once it is cancelled, and is waited for when the group stops.
//! Nothing is spawned and forgotten, so a stopped processor has no task
//! left writing to the database.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// A group of tasks stopped together: one stop token, one tracker.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tasks {
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Tasks {
    /// The token every task of the group watches.
    pub(crate) fn token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts `task` in the group, inside a `task` span named `name`.
    pub(crate) fn spawn<F>(&self, name: &'static str, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
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
