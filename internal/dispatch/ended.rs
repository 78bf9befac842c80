//! Deliveries that ended: each item's outcome taken in (its partition
//! marked for a gate check, a wait before it is ready again, the outage
//! held off or over), a panicked delivery recorded as a failed attempt,
//! and the drain at shutdown.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Dispatcher;
use super::deliver::{Delivery, record};
use crate::handler::Outcome;
use crate::ids::ItemKey;
use crate::store::Fence;

impl Dispatcher {
    /// A delivery task ended, and any others that ended with it.
    pub(super) fn joined(
        &mut self,
        joined: Result<(tokio::task::Id, Vec<(ItemKey, Delivery)>), tokio::task::JoinError>,
    ) -> bool {
        self.finished(joined);
        while let Some(more) = self.calls.tasks.try_join_next_with_id() {
            self.finished(more);
        }
        self.refill_at = Instant::now();
        true
    }

    /// Takes in one delivery task's outcome per item.
    fn finished(
        &mut self,
        joined: Result<(tokio::task::Id, Vec<(ItemKey, Delivery)>), tokio::task::JoinError>,
    ) {
        // None = the task panicked: every item records a failed attempt.
        let (task, deliveries) = match joined {
            Ok((task, each)) => (task, Some(each.into_iter().collect::<HashMap<_, _>>())),
            Err(e) => (e.id(), self.panicked(e)),
        };
        self.calls.calling.remove(&task);
        let Some(ids) = self.calls.task_items.remove(&task) else {
            return;
        };
        let ctx = self.ctx.clone();
        let health = &ctx.health.handler;
        for id in ids {
            let Some(fence) = self.calls.in_flight.remove(&id) else {
                continue;
            };
            if self.refilling.is_some() {
                self.settled.insert(id.clone());
            }
            // A partition still in the rotation is checked once a refill
            // finds it dry; one out of it may have run out of work.
            if !self.rotation.contains(&fence.partition_id) {
                self.held.marked.insert(fence.partition_id.clone());
            }
            let Some(deliveries) = &deliveries else {
                self.record_panic(fence);
                continue;
            };
            // An item without an entry: the task was aborted at shutdown.
            let delivery = deliveries.get(&id).unwrap_or(&Delivery::Finished);
            let wait = match delivery {
                Delivery::Finished => None,
                Delivery::Again(wait) => Some(*wait),
                Delivery::Unwritten(cool) | Delivery::Spared(cool) => Some(*cool),
                Delivery::Unreachable(_) => Some(Duration::ZERO),
                Delivery::Away(wait, _) => *wait,
            };
            if let Some(wait) = wait {
                let refilling = self.refilling.is_some();
                self.floors
                    .again(&fence.partition_id, wait, Instant::now(), refilling);
            }
            match delivery {
                Delivery::Unreachable(why) | Delivery::Away(_, why) => {
                    health.store(false, Ordering::Relaxed);
                    self.held_off(&id, why);
                }
                // While the breaker is open an answer ends no outage: it
                // is a 503 written as a retry for a call made before it
                // opened, or a late answer to one (the breaker closes on
                // the first real answer to a call made since). Each such
                // answer used to resume dispatch at full concurrency
                // until the next call failed.
                Delivery::Finished | Delivery::Again(_) if ctx.breaker.is_open() => {}
                Delivery::Finished | Delivery::Again(_) => {
                    health.store(true, Ordering::Relaxed);
                    if let Some(since) = self.outage.since
                        && self.outage.reachable()
                    {
                        ctx.health.set_hold(None);
                        ctx.metrics.held_off_since.set(0);
                        let held = Duration::from_secs(since.elapsed().as_secs());
                        tracing::info!(held_off = %humantime::format_duration(held), "handler reachable again: resuming dispatch");
                        self.end_release("the handler answers again: taking partitions again");
                    }
                }
                Delivery::Unwritten(cool) | Delivery::Spared(cool) => {
                    self.cooling.insert(id, Instant::now() + *cool);
                }
            }
        }
        self.ctx
            .metrics
            .in_flight
            .set(self.calls.in_flight.len() as i64);
    }

    /// Takes in a delivery that did not reach the handler (`why`): dispatch
    /// holds off, `status` shows why, and the log says so when it begins
    /// and again every [`outage::WARN_EVERY`] while it lasts.
    fn held_off(&mut self, item: &ItemKey, why: &str) {
        let now = Instant::now();
        self.outage.unreachable(item, why, now);
        let since = self.outage.since.unwrap_or(now);
        self.set_hold(why, since);
        // A probe failed: the partition it was leased for goes back.
        self.release.due |= self.release.active;
        if self.ctx.metrics.held_off_since.get() == 0 {
            let began = crate::client::unix_now() - now.duration_since(since).as_secs() as i64;
            self.ctx.metrics.held_off_since.set(began);
        }
        if self.outage.warn_due(now) {
            let held = Duration::from_secs(now.duration_since(since).as_secs());
            let url = crate::store::redact(&self.ctx.config.handler.url);
            tracing::warn!(
                handler = %url,
                error = %why,
                held_off = %humantime::format_duration(held),
                next_probe_in = ?self.outage.delay,
                releasing = self.release.active,
                "dispatch holds off: the handler is not there (no attempts are counted); probing with one item"
            );
        }
    }

    /// Says why dispatch holds off, since `since`, for `status`, `/readyz`
    /// and the console.
    pub(super) fn set_hold(&self, why: &str, since: Instant) {
        let url = crate::store::redact(&self.ctx.config.handler.url);
        let releasing = if self.release.active {
            "held off: releasing partitions (for longer than --session-expiry); "
        } else {
            ""
        };
        self.ctx.health.set_hold(Some(crate::server::Hold {
            reason: format!("{releasing}handler at {url}: {why}"),
            since: since.into_std(),
        }));
    }

    /// Logs a delivery task that did not return; None = it panicked (the
    /// caller records a failed attempt per item), or it was aborted at shutdown.
    fn panicked(&self, e: tokio::task::JoinError) -> Option<HashMap<ItemKey, Delivery>> {
        if !e.is_panic() {
            return Some(HashMap::new());
        }
        let items = self
            .calls
            .task_items
            .get(&e.id())
            .map(|ids| {
                ids.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let panic = e.into_panic();
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        tracing::error!(items = %items, panic = %message, "a delivery panicked; recording a failed attempt");
        None
    }

    /// Records a failed attempt for an item whose delivery panicked, so it
    /// is retried after a backoff like any failed attempt.
    fn record_panic(&mut self, fence: Fence) {
        let outcome = Outcome::retry("the delivery panicked (see the processor's log)");
        let id = fence.key();
        self.calls.in_flight.insert(id.clone(), fence.clone());
        let item = id.clone();
        let ctx = self.ctx.clone();
        let me = self.me.clone();
        let tenant = self.tenant_label(&fence.partition_id);
        let task = self.calls.tasks.spawn(async move {
            let view = ctx.delivering();
            let delivery = match view.retries.decide(&fence, outcome) {
                Some((write, label)) => record(&view, &me, fence, write, (label, &tenant)).await,
                None => Delivery::Finished,
            };
            vec![(id, delivery)]
        });
        self.calls.task_items.insert(task.id(), vec![item]);
    }

    /// Waits for in-flight deliveries (their results are written) up to `timeout`.
    pub(super) async fn drain(&mut self, timeout: Duration) {
        if let Some(refill) = self.refilling.take() {
            refill.abort();
        }
        let deadline = Instant::now() + timeout;
        // A gate check or acquire cycle ends on its own (each statement is
        // bounded by --statement-timeout); its writes are fenced like all.
        if let Some(upkeep) = self.upkeep.take()
            && tokio::time::timeout_at(deadline, upkeep).await.is_err()
        {
            tracing::warn!("drain timeout: abandoning a gate check or acquire cycle");
        }
        if self.calls.tasks.is_empty() {
            return;
        }
        tracing::info!(
            in_flight = self.calls.tasks.len(),
            "draining in-flight deliveries"
        );
        while !self.calls.tasks.is_empty() {
            tokio::select! {
                Some(j) = self.calls.tasks.join_next_with_id() => self.finished(j),
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(abandoned = self.calls.tasks.len(), "drain timeout: abandoning deliveries; their items stay available");
                    self.calls.tasks.abort_all();
                    break;
                }
            }
        }
    }
}
