//! The limits phase: what flow control costs when it does not bind (the
//! drain with a fleet-wide `--rate-limit` far above what Feed reaches, and
//! every partition in one of ten tenants whose limits never bind), and how
//! closely a binding `--rate-limit` holds when three processors share it.

use testkit::Backend;

use crate::drain::{Workload, drain_once};
use crate::handler::Handler;
use crate::report::{Accuracy, Limits};
use crate::{Args, variant};

/// Flags of the drain whose limits never bind.
const FREE: &[&str] = &["--rate-limit", "100000000/s"];
/// The binding limit of the accuracy run.
const RATE: f64 = 2000.0;
const BINDING: &[&str] = &["--rate-limit", "2000/s"];
/// Seconds the accuracy run lasts at that rate.
const SECONDS: usize = 15;

pub(crate) async fn limits(
    backend: Backend,
    args: &Args,
    handler: &Handler,
    client: &reqwest::Client,
    ceil: Option<testkit::Stats>,
) -> Limits {
    let w = Workload {
        flags: FREE,
        tenants: 10,
        ..Workload::new(args, args.items)
    };
    let ctx = (backend, args, handler, client);
    let free = variant(ctx, "limits not binding", w, ceil, args.runs).await;
    let accuracy = match accuracy(backend, args, handler, client).await {
        Ok(a) => {
            println!(
                "  rate limit {RATE:.0}/s over {} processors: mean {:.3}× the limit, worst second {:.1} % off ({} s)",
                a.processors,
                a.mean_ratio,
                a.worst_off * 100.0,
                a.per_second.len()
            );
            Some(a)
        }
        Err(e) => {
            println!("  rate limit accuracy failed: {e:#}");
            None
        }
    };
    Limits { free, accuracy }
}

async fn accuracy(
    backend: Backend,
    args: &Args,
    handler: &Handler,
    client: &reqwest::Client,
) -> anyhow::Result<Accuracy> {
    let processors = 3;
    let w = Workload {
        flags: BINDING,
        processors,
        ..Workload::new(args, RATE as usize * SECONDS)
    };
    let run = drain_once(backend, args, handler, client, w).await?;
    let per_second = handler.state.per_second();
    anyhow::ensure!(
        per_second.len() >= 3,
        "too short to measure: {per_second:?}"
    );
    let mean = per_second.iter().sum::<u64>() as f64 / per_second.len() as f64;
    let worst_off = per_second
        .iter()
        .map(|n| (*n as f64 - RATE).abs() / RATE)
        .fold(0.0, f64::max);
    Ok(Accuracy {
        limit_per_s: RATE,
        processors,
        per_second,
        mean_ratio: mean / RATE,
        worst_off,
        run,
    })
}
