//! Pickup of new partitions: one item enqueued, at random moments, into a
//! partition nobody holds, with idle processors at their defaults; enqueue
//! call → first POST. With one and three processors (one of them must take
//! each partition), enqueued with the library (a producer the processors
//! know nothing of) or through the one processor's own API.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use feed::store::{NewItem, PartitionSpec};
use testkit::Backend;

use crate::Args;
use crate::fixture::{Db, Proc, item_body};
use crate::handler::Handler;
use crate::latency::{summary, wait_seen};
use crate::report::Pickup;

/// The producer token the API scenario enqueues with.
const TOKEN: &str = "bench-producer-token-0123456789";

/// How the new partitions are enqueued.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via {
    /// `Store::enqueue` from the bench.
    Store,
    /// `POST /api/v1/partitions/{id}/items` on the (one) processor.
    Api,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Store => "library enqueue",
            Via::Api => "the processor's own API",
        }
    }
}

/// The scenarios `backend` runs: 1 processor through the library and
/// through its API; on PostgreSQL also 3 processors.
pub(crate) fn scenarios(backend: Backend) -> Vec<(usize, Via)> {
    let mut s = vec![(1, Via::Store), (1, Via::Api)];
    if backend == Backend::Postgres {
        s.push((3, Via::Store));
    }
    s
}

/// Samples of a scenario that only a poll can pick up (a new partition
/// on a database without notifications, enqueued behind the processors'
/// backs): each takes up to a second, so fewer.
const POLLED_SAMPLES: usize = 50;

/// One scenario: `processors` idle processors, `--pickup-samples` new
/// partitions enqueued `via`.
pub(crate) async fn pickup_new(
    db: &Db,
    args: &Args,
    handler: &Handler,
    processors: usize,
    via: Via,
) -> Result<Pickup> {
    handler.state.reset();
    let flags: &[&str] = match via {
        Via::Store => &[],
        Via::Api => &["--ui", "--producer-token", TOKEN],
    };
    let mut procs = (0..processors)
        .map(|_| Proc::spawn(&db.url, &handler.url(), flags))
        .collect::<Result<Vec<_>>>()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (db
        .count("SELECT COUNT(*) AS n FROM feed_processors")
        .await? as usize)
        < processors
    {
        if Instant::now() >= deadline {
            bail!("{processors} processors did not register within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The first acquire cycles and looks at new items run at start.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let client = reqwest::Client::new();
    let statements = async |procs: &[Proc]| {
        let mut n = 0;
        for p in procs {
            n += p.outcomes(&client).await.statements;
        }
        n
    };
    // The idle rate, to take out of the statements counted per sample.
    let idle_from = (Instant::now(), statements(&procs).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = (Instant::now(), statements(&procs).await);
    let idle_rate =
        (started.1 - idle_from.1) as f64 / started.0.duration_since(idle_from.0).as_secs_f64();
    let polled = db.backend != Backend::Postgres && matches!(via, Via::Store);
    let samples = if polled {
        args.pickup_samples.min(POLLED_SAMPLES)
    } else {
        args.pickup_samples
    };
    let base = procs[0].listen.clone();
    let (mut lat, mut enq, mut missed) = (Vec::new(), Vec::new(), 0);
    for i in 0..samples {
        tokio::time::sleep(Duration::from_millis(rand::random_range(50..400))).await;
        for p in procs.iter_mut() {
            p.check_alive()?;
        }
        let id = format!("pickup-new-{i}");
        let partition = format!("new-{i:06}");
        let t0 = Instant::now();
        match via {
            Via::Store => {
                let item = NewItem::new(item_body(i, false)).with_id(id.clone());
                db.store
                    .enqueue(&partition, &PartitionSpec::default(), vec![item])
                    .await?;
            }
            Via::Api => {
                let body = format!(r#"[{{"id": "{id}", "data": {{"n": {i}}}}}]"#);
                let r = client
                    .post(format!("http://{base}/api/v1/partitions/{partition}/items"))
                    .bearer_auth(TOKEN)
                    .body(body)
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("the API refused an enqueue: {}", r.text().await?);
                }
            }
        }
        enq.push(t0.elapsed().as_secs_f64() * 1e3);
        match wait_seen(handler, &id, t0).await {
            Some(ms) => lat.push(ms),
            None => missed += 1,
        }
    }
    let ended = (Instant::now(), statements(&procs).await);
    for p in procs {
        p.stop().await;
    }
    let window = ended.0.duration_since(started.0).as_secs_f64();
    let net = (ended.1 - started.1) as f64 - idle_rate * window;
    let mut p = summary(lat, enq, missed, 0)?;
    p.processors = processors;
    p.via = via.name().into();
    p.statements_per_sample = Some(net / samples.max(1) as f64);
    Ok(p)
}
