//! The history phase: one long drain (`--history` items over 100
//! partitions, a plain-SQL backlog) timed per window of a million posts, to
//! show whether the rate holds as dead row versions pile up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use testkit::Backend;

use crate::Args;
use crate::drain::{Backlog, DrainRun, Workload, drain_on};
use crate::fixture::Db;
use crate::handler::Handler;

/// The window the first and last rates are taken over, at most.
const WINDOW: usize = 1_000_000;

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct History {
    pub(crate) items: usize,
    pub(crate) partitions: usize,
    /// Posts per window (a million, or a tenth of the items if fewer).
    pub(crate) window: usize,
    pub(crate) first_per_s: Option<f64>,
    pub(crate) last_per_s: Option<f64>,
    /// Last window's rate ÷ the first's.
    pub(crate) ratio: Option<f64>,
    pub(crate) run: Option<DrainRun>,
}

/// When the handler's post count crossed the window marks.
#[derive(Default)]
struct Marks {
    first_end: Option<Instant>,
    last_start: Option<Instant>,
    end: Option<Instant>,
}

/// Drains `items` items over 100 partitions on `backend`, noting when the
/// first window of posts ended and when the last began.
pub(crate) async fn history(
    backend: Backend,
    args: &Args,
    items: usize,
    handler: &Handler,
    client: &reqwest::Client,
) -> Result<History> {
    let window = WINDOW.min(items / 10).max(1);
    let w = Workload {
        partitions: 100,
        backlog: Backlog::Sql,
        ..Workload::new(args, items)
    };
    // Posts of earlier phases must not count as this drain's.
    handler.state.reset();
    let stop = AtomicBool::new(false);
    let (run, marks) = Db::scoped(backend, args, 6, async |db| {
        let drain = async {
            let r = drain_on(db, args, w, handler, client).await;
            stop.store(true, Ordering::SeqCst);
            r
        };
        let watch = async {
            let mut m = Marks::default();
            while !stop.load(Ordering::SeqCst) {
                let posts = handler.state.posts.load(Ordering::Relaxed) as usize;
                let now = Instant::now();
                if posts >= window {
                    m.first_end.get_or_insert(now);
                }
                if posts >= items - window {
                    m.last_start.get_or_insert(now);
                }
                if posts >= items {
                    m.end.get_or_insert(now);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            m
        };
        let (run, marks) = tokio::join!(drain, watch);
        Ok((run?, marks))
    })
    .await?;
    let rate = |from: Option<Instant>, to: Option<Instant>| match (from, to) {
        (Some(a), Some(b)) if b > a => Some(window as f64 / (b - a).as_secs_f64()),
        _ => None,
    };
    let first_per_s = rate(handler.state.first_post(), marks.first_end);
    let last_per_s = rate(marks.last_start, marks.end);
    Ok(History {
        items,
        partitions: 100,
        window,
        first_per_s,
        last_per_s,
        ratio: first_per_s.zip(last_per_s).map(|(f, l)| l / f),
        run: Some(run),
    })
}
