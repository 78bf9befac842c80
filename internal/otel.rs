//! OpenTelemetry traces, off unless the standard variables name an OTLP
//! endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). The rest (protocol, headers,
//! timeout, sampler, batching, resource) is read from the standard
//! variables by the OpenTelemetry SDK itself.
//!
//! Feed's spans are `tracing` spans of this module's target, exported by
//! `tracing-opentelemetry`; the logs never show them. Without an exporter
//! nothing records them and every function here returns at its first
//! line, so tracing costs nothing when it is off.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::store::ReadyItem;
use crate::{Error, Result};

/// The target of Feed's spans, which the logs leave out.
pub const TARGET: &str = "feed::otel";

static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are being exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The trace exporter, from the standard variables.
pub struct Traces {
    provider: SdkTracerProvider,
    /// Where spans go, for the start-up log line: its password and secret
    /// query values (`?api_key=`) masked as the handler URL's are.
    pub endpoint: String,
}

impl Traces {
    /// The exporter the environment asks for: None when no OTLP endpoint
    /// is set, or `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`.
    pub fn from_env() -> Result<Option<Traces>> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Traces>> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(Error::Config(format!(
                    "OTEL_TRACES_EXPORTER={other} is not supported; Feed exports traces with \
                     otlp (set OTEL_EXPORTER_OTLP_ENDPOINT) or none"
                )));
            }
        }
        let Some(endpoint) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        else {
            return Ok(None);
        };
        let (name, protocol) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p),
            None => (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                var("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_else(|| "http/protobuf".into()),
            ),
        };
        let protocol = match protocol.as_str() {
            "http/protobuf" => opentelemetry_otlp::Protocol::HttpBinary,
            "http/json" => opentelemetry_otlp::Protocol::HttpJson,
            other => {
                return Err(Error::Config(format!(
                    "{name}={other} is not supported; use http/protobuf (the collector's \
                     port 4318) or http/json"
                )));
            }
        };
        use opentelemetry_otlp::WithExportConfig;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|e| {
                // The SDK's error repeats the endpoint, secrets and all.
                let e = e
                    .to_string()
                    .replace(&endpoint, &crate::store::redact(&endpoint));
                Error::Config(format!("cannot set up the OTLP trace exporter: {e}"))
            })?;
        // The SDK names the service `unknown_service` unless told.
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("feed");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        ON.store(true, Ordering::Relaxed);
        let endpoint = crate::store::redact(&endpoint);
        Ok(Some(Traces { provider, endpoint }))
    }

    /// The layer that exports Feed's spans, with the log events (info and
    /// above) that happen inside them as span events.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("feed"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(crate::logs::Asked(
                tracing_subscriber::filter::filter_fn(|m| {
                    if m.is_span() {
                        m.target() == TARGET
                    } else {
                        *m.level() <= tracing::Level::INFO
                    }
                })
                .with_max_level_hint(tracing::level_filters::LevelFilter::INFO),
            ))
    }

    /// Exports the spans still queued, then stops the exporter.
    pub fn shutdown(&self) -> Result<()> {
        ON.store(false, Ordering::Relaxed);
        self.provider
            .shutdown()
            .map_err(|e| Error::Config(format!("could not export the last spans: {e}")))
    }
}

/// One `traceparent` value read as a context.
struct Header<'a>(&'a str);

impl Extractor for Header<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The span a W3C `traceparent` names, if it is a valid one.
fn remote(traceparent: &str) -> Option<SpanContext> {
    let cx = TraceContextPropagator::new().extract(&Header(traceparent));
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

pub use crate::validate::traceparent;

/// The `process` span of one delivery (CONSUMER, as the messaging
/// conventions have it): a child of the producer's span for one item, and
/// linked to each item's producer span for a batch.
pub(crate) fn process(items: &[ReadyItem]) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    let attempt = |i: &ReadyItem| i.fence.attempts + 1;
    match items {
        [one] => {
            let f = &one.fence;
            let span = tracing::info_span!(target: TARGET, parent: None, "process",
                otel.kind = "consumer",
                messaging.system = "feed",
                messaging.operation.name = "process",
                messaging.operation.type = "process",
                messaging.destination.name = %f.partition_id,
                messaging.message.id = %f.id,
                feed.gate = f.gate,
                feed.attempt = attempt(one),
                error.type = Empty,
            );
            if let Some(parent) = one.traceparent.as_deref().and_then(remote) {
                let _ =
                    span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
            }
            span
        }
        many => {
            let span = tracing::info_span!(target: TARGET, parent: None, "process",
                otel.kind = "consumer",
                messaging.system = "feed",
                messaging.operation.name = "process",
                messaging.operation.type = "process",
                messaging.batch.message_count = many.len(),
                messaging.destination.name = Empty,
                error.type = Empty,
            );
            if let Some(first) = many.first().map(|i| &i.fence.partition_id)
                && many.iter().all(|i| &i.fence.partition_id == first)
            {
                span.record("messaging.destination.name", first.as_str());
            }
            for item in many {
                if let Some(producer) = item.traceparent.as_deref().and_then(remote) {
                    span.add_link_with_attributes(
                        producer,
                        vec![
                            opentelemetry::KeyValue::new(
                                "messaging.message.id",
                                item.fence.id.to_string(),
                            ),
                            opentelemetry::KeyValue::new("feed.attempt", i64::from(attempt(item))),
                        ],
                    );
                }
            }
            span
        }
    }
}

/// The HTTP client span of a request to `uri`, a child of the current
/// span; its context goes to the receiver as `traceparent`.
pub(crate) fn client(uri: &http::Uri) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: TARGET, "POST",
        otel.kind = "client",
        http.request.method = "POST",
        server.address = uri.host().unwrap_or_default(),
        server.port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 }),
        url.path = uri.path(),
        http.response.status_code = Empty,
        error.type = Empty,
    )
}

/// The span of one event delivery (PRODUCER: it sends a message on);
/// its context goes to the receiver as `traceparent`.
pub(crate) fn send(event: &crate::store::events::Event) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: TARGET, parent: None, "send",
        otel.kind = "producer",
        messaging.system = "feed",
        messaging.operation.name = "send",
        messaging.operation.type = "send",
        messaging.destination.name = %event.partition_id,
        messaging.message.id = event.id,
        feed.event = %event.kind,
        feed.gate = event.gate,
        feed.attempt = event.attempts + 1,
        http.response.status_code = Empty,
        error.type = Empty,
    )
}

/// The span of a gate advance of `partition` from `from` to `to`.
pub(crate) fn advance(partition: &str, from: i64, to: i64) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: TARGET, parent: None, "advance gate",
        messaging.system = "feed",
        messaging.destination.name = partition,
        feed.gate = from,
        feed.next_gate = to,
    )
}

/// Marks the moment `partition` closed, complete (a span of its own: the
/// close is one statement for many partitions).
pub(crate) fn closed(partition: &str) {
    if !on() {
        return;
    }
    let _span = tracing::info_span!(target: TARGET, parent: None, "close",
        messaging.system = "feed",
        messaging.destination.name = partition,
    );
}

/// Puts `span`'s context into `headers` as `traceparent` (and
/// `tracestate`), so that the receiver's spans join the trace.
pub(crate) fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if !on() {
        return;
    }
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new()
            .inject_context(&cx, &mut opentelemetry_http::HeaderInjector(headers));
    }
}

/// Marks `span` failed with a short, low-cardinality `error.type`.
pub(crate) fn failed(span: &tracing::Span, error_type: &str) {
    if !on() {
        return;
    }
    span.record("error.type", error_type);
    span.set_status(opentelemetry::trace::Status::error(error_type.to_string()));
}

/// Records the HTTP status an answer came with; 4xx and 5xx fail the span
/// (`error.type` is the status code, as the HTTP conventions have it).
pub(crate) fn answered(span: &tracing::Span, status: u16) {
    if !on() {
        return;
    }
    span.record("http.response.status_code", status);
    if status >= 400 {
        failed(span, &status.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_traceparents_are_read_back() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert!(remote(&traceparent(good).unwrap()).is_some());
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more";
        assert!(
            remote(&traceparent(later).unwrap()).is_some(),
            "the stored form"
        );
    }

    #[test]
    fn the_environment_decides() {
        fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
            move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        }
        assert!(Traces::from_vars(vars(&[])).unwrap().is_none());
        const DISABLED: &[(&str, &str)] = &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert!(Traces::from_vars(vars(DISABLED)).unwrap().is_none());
        const GRPC: &[(&str, &str)] = &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let Err(e) = Traces::from_vars(vars(GRPC)) else {
            panic!("grpc was taken")
        };
        assert!(e.to_string().contains("use http/protobuf"), "{e}");
        const ZIPKIN: &[(&str, &str)] = &[("OTEL_TRACES_EXPORTER", "zipkin")];
        let Err(e) = Traces::from_vars(vars(ZIPKIN)) else {
            panic!("zipkin was taken")
        };
        assert!(e.to_string().contains("OTEL_TRACES_EXPORTER=zipkin"), "{e}");
    }
}
