//! The limits phase: what flow control costs when it does not bind (the
//! drain with a fleet-wide `--rate-limit` far above what Feed reaches, and
//! every partition in one of ten tenants whose limits never bind), and how
//! closely a binding `--rate-limit` holds when three processors share it.

use testkit::Backend;

use crate::drain::{Workload, drain_once};
use crate::handler::Handler;
use crate::report::{Accuracy, Limits, Scenario, scenario};
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
    // Runs alternate, one without limits and one with, so that a
    // database that slows from run to run weighs on both alike.
    let w = Workload {
        flags: FREE,
        tenants: 10,
        ..Workload::new(args, args.items)
    };
    let ctx = (backend, args, handler, client);
    let (mut none, mut free) = (Vec::new(), Vec::new());
    for i in 1..=args.runs {
        for (name, w, runs) in [
            ("without limits", Workload::new(args, args.items), &mut none),
            ("limits not binding", w, &mut free),
        ] {
            runs.push(variant(ctx, &format!("{name} (pair {i})"), w, ceil, 1).await);
        }
    }
    let (none, free) = (
        merged("without limits", none, ceil),
        merged("limits not binding", free, ceil),
    );
    let accuracy = match accuracy(backend, args, handler, client).await {
        Ok(a) => {
            println!(
                "  rate limit {RATE:.0}/s over {} processors: mean {:.3}× the limit, worst second {:.1} % off, \
                 {:.1} % before the last three ({} s)",
                a.processors,
                a.mean_ratio,
                a.worst_off * 100.0,
                a.steady_worst_off * 100.0,
                a.per_second.len()
            );
            Some(a)
        }
        Err(e) => {
            println!("  rate limit accuracy failed: {e:#}");
            None
        }
    };
    Limits {
        none,
        free,
        accuracy,
    }
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
        per_second.len() >= 6,
        "too short to measure: {per_second:?}"
    );
    let mean = per_second.iter().sum::<u64>() as f64 / per_second.len() as f64;
    let off = |seconds: &[u64]| {
        seconds
            .iter()
            .map(|n| (*n as f64 - RATE).abs() / RATE)
            .fold(0.0, f64::max)
    };
    let worst_off = off(&per_second);
    // The last seconds, when processors run out of work one by one and
    // strand what they had reserved, apart.
    let steady_worst_off = off(&per_second[..per_second.len() - 3]);
    Ok(Accuracy {
        limit_per_s: RATE,
        processors,
        per_second,
        mean_ratio: mean / RATE,
        worst_off,
        steady_worst_off,
        run,
    })
}

/// One scenario of the runs of several.
pub(crate) fn merged(name: &str, parts: Vec<Scenario>, ceil: Option<testkit::Stats>) -> Scenario {
    let runs = parts.iter().flat_map(|p| p.runs.clone()).collect();
    let errors = parts.into_iter().flat_map(|p| p.errors).collect();
    scenario(name, runs, errors, ceil)
}
