//! The traces phase: what OpenTelemetry tracing costs. The drain runs
//! three ways in a row, repeated `--runs` times so that a database that
//! slows from run to run weighs on each alike: traces off (no variable
//! set), on with every delivery sampled, and on at 1 % (a parent-based
//! trace-id ratio), exporting over OTLP/HTTP to a receiver served here
//! that decodes and counts the spans.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde::Serialize;
use testkit::Backend;

use crate::drain::Workload;
use crate::handler::Handler;
use crate::report::Scenario;
use crate::{Args, variant};

/// Spans the receiver has decoded so far.
static SPANS: AtomicU64 = AtomicU64::new(0);

/// The receiver's endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`), started on
/// first use.
pub(crate) async fn endpoint() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    if let Some(url) = URL.get() {
        return url;
    }
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|body: Bytes| async move {
            if let Ok(export) = ExportTraceServiceRequest::decode(body) {
                let n: usize = export
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len())
                    .sum();
                SPANS.fetch_add(n as u64, Ordering::Relaxed);
            }
            ""
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port for the OTLP receiver");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    URL.get_or_init(|| url)
}

/// The three drains of the phase, and the spans each traced one exported.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Traces {
    pub(crate) off: Scenario,
    pub(crate) all: Scenario,
    pub(crate) one_percent: Scenario,
    /// Spans exported per item: at 100 % and at 1 %.
    pub(crate) spans_per_item: (f64, f64),
}

pub(crate) async fn traces(
    backend: Backend,
    args: &Args,
    handler: &Handler,
    client: &reqwest::Client,
    ceil: Option<testkit::Stats>,
) -> Traces {
    let ctx = (backend, args, handler, client);
    let (mut off, mut all, mut one) = (Vec::new(), Vec::new(), Vec::new());
    let (mut spans_all, mut spans_one) = (0u64, 0u64);
    for i in 1..=args.runs {
        for (name, ratio, runs) in [
            ("traces off", None, &mut off),
            ("traces 100 %", Some("1.0"), &mut all),
            ("traces 1 %", Some("0.01"), &mut one),
        ] {
            let w = Workload {
                traces: ratio,
                ..Workload::new(args, args.items)
            };
            let before = SPANS.load(Ordering::Relaxed);
            runs.push(variant(ctx, &format!("{name} (round {i})"), w, ceil, 1).await);
            let spans = SPANS.load(Ordering::Relaxed) - before;
            match ratio {
                Some("1.0") => spans_all += spans,
                Some(_) => spans_one += spans,
                None => {}
            }
        }
    }
    let items = (args.items * args.runs).max(1) as f64;
    let spans_per_item = (spans_all as f64 / items, spans_one as f64 / items);
    println!(
        "  traces: {:.2} spans exported per item at 100 %, {:.3} at 1 %",
        spans_per_item.0, spans_per_item.1
    );
    Traces {
        off: crate::limits::merged("traces off", off, ceil),
        all: crate::limits::merged("traces 100 %", all, ceil),
        one_percent: crate::limits::merged("traces 1 %", one, ceil),
        spans_per_item,
    }
}
