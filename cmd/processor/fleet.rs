//! The fleet's lines of `processor status`: throughput, the handler's
//! state and latency, the backlog, and the live processors.

use std::time::Duration;

use feed::store::status::Status;

use super::status::{clean, table};

/// The fleet's results per second over the last 1, 5 and 15 minutes.
pub(crate) fn print_throughput(s: &Status) {
    let t = &s.throughput;
    let windows = [
        ("1 min", t.last_1m),
        ("5 min", t.last_5m),
        ("15 min", t.last_15m),
    ];
    let shown: Vec<String> = windows
        .iter()
        .map(|(w, r)| {
            let (c, rt, f) = (r.completed, r.retried, r.failed);
            format!("{w}: {c:.1} completed, {rt:.1} retried, {f:.1} failed")
        })
        .collect();
    println!("throughput  per second over {}", shown.join("; "));
    let h = &s.handler;
    println!("handler     {}: {}", h.state, clean(&h.reason));
    let latency = |p: Option<feed::recent::Percentiles>| match p {
        Some(p) => format!(
            "p50 {:.0} ms, p95 {:.0} ms, p99 {:.0} ms ({})",
            p.p50_ms, p.p95_ms, p.p99_ms, p.count
        ),
        None => "none".into(),
    };
    println!(
        "latency     last 5 min: handler calls {}; queue wait {}",
        latency(h.latency),
        latency(s.queue_wait)
    );
}

/// The fleet's backlog, one line per tenant.
pub(crate) fn print_backlog(s: &Status) {
    for (n, t) in s.backlog.iter().enumerate() {
        let oldest = t.oldest_ready_ms.map_or(String::new(), |ms| {
            let age = std::time::Duration::from_secs((ms.max(0) / 1000) as u64);
            format!(" (the oldest for {})", humantime::format_duration(age))
        });
        println!(
            "{:<11} {}: {} ready{oldest}, {} scheduled, {} retrying",
            if n == 0 { "backlog" } else { "" },
            t.tenant.as_deref().map_or("no tenant".into(), clean),
            t.ready,
            t.scheduled,
            t.retrying
        );
    }
}

/// The live processors, and why any of them holds dispatch off.
pub(crate) fn print_processors(s: &Status) {
    let mut t = table([
        "processor",
        "host",
        "pid",
        "version",
        "partitions",
        "in flight",
        "calls/s",
        "last heartbeat",
    ]);
    for p in &s.processors {
        let f = p.figures.as_ref();
        t.add_row([
            clean(&p.id),
            clean(&p.hostname),
            p.pid.to_string(),
            clean(&p.software_version),
            p.partitions.to_string(),
            f.map_or("unknown".into(), |f| f.in_flight.to_string()),
            f.map_or("unknown".into(), |f| format!("{:.1}", f.calls_per_second)),
            format!("{:.1}s ago", p.heartbeat_age_ms as f64 / 1000.0),
        ]);
    }
    if s.processors.is_empty() {
        println!("no live processors");
    } else {
        println!("{t}");
    }
    for p in &s.processors {
        if let (Some(why), Some(since)) = (&p.held_reason, p.held_since) {
            let held = (p.heartbeat_at - since + p.heartbeat_age_ms).max(0) as u64;
            println!(
                "processor {} holds dispatch off (for {}, no attempts counted): {}",
                clean(&p.id),
                humantime::format_duration(Duration::from_secs(held / 1000)),
                clean(why)
            );
        }
    }
}
