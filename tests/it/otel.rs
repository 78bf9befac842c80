//! OpenTelemetry traces against a real OTLP/HTTP receiver served here,
//! which decodes each export with the `opentelemetry-proto` crate: span
//! names, kinds and attributes, parents and links, the handler's
//! `traceparent` naming an exported span, the producer's context (enqueue
//! lines, the CLI flag, the API header, an SQL column) as the delivery's
//! parent, sampling, and nothing exported or sent when tracing is off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use parking_lot::Mutex;
use prost::Message;

use crate::cli::{enqueue_cli, text};
use crate::enqueue_api::{PRODUCER, message, send, serve};
use crate::support::{Call, Handler, Proc, TestDb, done, json, wait_for};
use crate::{backend_tests, behaviour};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "b7ad6b7169203331";

/// A producer's traceparent: trace `t`, span `s`, sampled or not.
fn tp(t: &str, s: &str, sampled: bool) -> String {
    format!("00-{t}-{s}-{}", if sampled { "01" } else { "00" })
}

/// One exported span and the service that exported it.
#[derive(Clone)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }

    fn id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    fn trace(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    fn parent(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
}

fn attr(list: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<String> {
    let kv = list.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// One export request as received: its path, headers and body.
#[derive(Clone)]
struct Request {
    path: String,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

/// An OTLP/HTTP receiver on a free port: every request is kept, and the
/// spans of protobuf ones are decoded.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Exported>>>,
    requests: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<Request>>>,
}

impl Collector {
    async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<Exported>>> = Arc::default();
        let requests = Arc::new(AtomicUsize::new(0));
        let received: Arc<Mutex<Vec<Request>>> = Arc::default();
        let (s, r, k) = (spans.clone(), requests.clone(), received.clone());
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: Bytes| {
                let (s, r, k) = (s.clone(), r.clone(), k.clone());
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    let protobuf = headers
                        .get("content-type")
                        .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
                    k.lock().push(Request {
                        path: uri.path().to_string(),
                        headers,
                        body: body.clone(),
                    });
                    let export = match protobuf {
                        true => ExportTraceServiceRequest::decode(body).expect("OTLP protobuf"),
                        false => ExportTraceServiceRequest::default(),
                    };
                    for rs in export.resource_spans {
                        let service = rs
                            .resource
                            .as_ref()
                            .and_then(|r| attr(&r.attributes, "service.name"))
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for span in ss.spans {
                                s.lock().push(Exported {
                                    service: service.clone(),
                                    span,
                                });
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Collector {
            url,
            spans,
            requests,
            received,
        }
    }

    /// The variables that point a processor here, exporting at once.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.url.clone()),
            ("OTEL_SERVICE_NAME", "feed-test".into()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ]
    }

    /// Waits (bounded) until the spans exported so far satisfy `enough`.
    async fn wait(&self, what: &str, enough: impl Fn(&[Exported]) -> bool) -> Vec<Exported> {
        wait_for(what, Duration::from_secs(20), || async {
            enough(&self.spans.lock())
        })
        .await;
        self.spans.lock().clone()
    }
}

/// `processor run` for `handler` exporting to `collector`, with `extra` flags and `env`.
fn traced(db: &TestDb, handler: &Handler, extra: &[&str], env: &[(&str, String)]) -> Proc {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Proc::start_with_env(db, &handler.url(), extra, &env)
}

fn named<'a>(spans: &'a [Exported], name: &str) -> Vec<&'a Exported> {
    spans.iter().filter(|s| s.span.name == name).collect()
}

/// The `process` span of item `id`'s delivery (its first one).
fn process_of<'a>(spans: &'a [Exported], id: &str) -> &'a Exported {
    spans
        .iter()
        .find(|s| s.span.name == "process" && s.attr("messaging.message.id").as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no process span for {id}"))
}

/// The HTTP client span under `parent`.
fn post_under<'a>(spans: &'a [Exported], parent: &Exported) -> &'a Exported {
    spans
        .iter()
        .find(|s| s.span.name == "POST" && s.parent() == parent.id())
        .unwrap_or_else(|| panic!("no POST span under {}", parent.id()))
}

fn enqueue(db: &TestDb, partition: &str, lines: &str, flags: &[&str]) {
    let o = enqueue_cli(db, partition, flags, lines);
    assert!(o.status.success(), "{}", text(&o));
}

fn call_of(handler: &Handler, item: &str) -> Call {
    handler
        .ledger
        .lock()
        .iter()
        .find(|c| c.item == item)
        .cloned()
        .unwrap_or_else(|| panic!("no call for {item}"))
}

behaviour!(a_producers_trace_is_the_parent_of_the_delivery);
async fn a_producers_trace_is_the_parent_of_the_delivery(db: TestDb) {
    let collector = Collector::start().await;
    let producer = tp(TRACE, PARENT, true);
    let lines = format!(
        "{{\"id\": \"traced\", \"data\": 1, \"traceparent\": \"{producer}\"}}\n\
         {{\"id\": \"untraced\", \"data\": 2}}\n"
    );
    enqueue(&db, "p", &lines, &[]);
    let handler = Handler::start(|_| done()).await;
    let _p = traced(&db, &handler, &[], &collector.env());
    db.wait_complete(2).await;
    let spans = collector
        .wait("both deliveries and the close", |s| {
            named(s, "process").len() == 2
                && named(s, "POST").len() == 2
                && !named(s, "close").is_empty()
        })
        .await;

    let process = process_of(&spans, "traced");
    assert_eq!(process.service, "feed-test");
    assert_eq!(process.span.kind, SpanKind::Consumer as i32);
    assert_eq!(
        (process.trace(), process.parent()),
        (TRACE.into(), PARENT.into())
    );
    for (key, value) in [
        ("messaging.system", "feed"),
        ("messaging.operation.name", "process"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "p"),
        ("feed.gate", "0"),
        ("feed.attempt", "1"),
    ] {
        assert_eq!(process.attr(key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(process.attr("error.type"), None);

    let post = post_under(&spans, process);
    assert_eq!(post.span.kind, SpanKind::Client as i32);
    assert_eq!(post.trace(), TRACE);
    assert_eq!(post.attr("http.request.method").as_deref(), Some("POST"));
    assert_eq!(
        post.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    // The handler's traceparent names the exported client span.
    let call = call_of(&handler, "traced");
    assert_eq!(
        call.header("traceparent"),
        Some(tp(TRACE, &post.id(), true).as_str())
    );

    // An item without a producer's trace starts one of its own.
    let own = process_of(&spans, "untraced");
    assert!(own.span.parent_span_id.is_empty());
    assert_ne!(own.trace(), TRACE);
    let call = call_of(&handler, "untraced");
    let post = post_under(&spans, own);
    assert_eq!(
        call.header("traceparent"),
        Some(tp(&own.trace(), &post.id(), true).as_str())
    );

    let close = named(&spans, "close");
    assert_eq!(
        close[0].attr("messaging.destination.name").as_deref(),
        Some("p")
    );
}

backend_tests!(a_batch_links_every_items_trace: sqlite => Sqlite);
async fn a_batch_links_every_items_trace(db: TestDb) {
    let collector = Collector::start().await;
    let spans_of = ["1111111111111111", "2222222222222222", "3333333333333333"];
    let lines: String = spans_of
        .iter()
        .enumerate()
        .map(|(n, s)| {
            format!(
                "{{\"id\": \"b{n}\", \"data\": {n}, \"traceparent\": \"{}\"}}\n",
                tp(TRACE, s, true)
            )
        })
        .collect();
    enqueue(&db, "p", &lines, &[]);
    let handler = Handler::start(|call: &Call| {
        let n = call.data.as_array().map_or(0, Vec::len);
        json(
            200,
            serde_json::Value::Array(vec![serde_json::json!({"done": true}); n]),
        )
    })
    .await;
    let _p = traced(
        &db,
        &handler,
        &["--batch-size", "3", "--batch-wait", "1s"],
        &collector.env(),
    );
    db.wait_complete(3).await;
    let spans = collector
        .wait("the batch's spans", |s| {
            !named(s, "process").is_empty() && !named(s, "POST").is_empty()
        })
        .await;
    let batch = named(&spans, "process")
        .into_iter()
        .find(|s| s.attr("messaging.batch.message_count").as_deref() == Some("3"))
        .expect("one call for the three items");
    assert_eq!(batch.span.kind, SpanKind::Consumer as i32);
    assert_eq!(
        batch.attr("messaging.batch.message_count").as_deref(),
        Some("3")
    );
    assert_eq!(
        batch.attr("messaging.destination.name").as_deref(),
        Some("p")
    );
    // A batch has no one parent: it links to each item's producer span.
    assert!(batch.span.parent_span_id.is_empty());
    let mut linked: Vec<(String, String, Option<String>)> = batch
        .span
        .links
        .iter()
        .map(|l| {
            (
                hex::encode(&l.trace_id),
                hex::encode(&l.span_id),
                attr(&l.attributes, "messaging.message.id"),
            )
        })
        .collect();
    linked.sort();
    let expected: Vec<(String, String, Option<String>)> = spans_of
        .iter()
        .enumerate()
        .map(|(n, s)| (TRACE.to_string(), s.to_string(), Some(format!("b{n}"))))
        .collect();
    assert_eq!(linked, expected);
    let post = post_under(&spans, batch);
    let sent = tp(&batch.trace(), &post.id(), true);
    let calls = handler.ledger.lock().clone();
    assert!(
        calls
            .iter()
            .any(|c| c.header("traceparent") == Some(sent.as_str())),
        "no call carried {sent}"
    );
}

backend_tests!(failures_gates_closes_and_events_are_traced: sqlite => Sqlite, postgres => Postgres);
async fn failures_gates_closes_and_events_are_traced(db: TestDb) {
    let collector = Collector::start().await;
    enqueue(
        &db,
        "p",
        "{\"id\": \"first\", \"data\": 1}\n{\"id\": \"second\", \"gate\": 1, \"data\": 2}\n",
        &[],
    );
    let handler = Handler::start(|call: &Call| {
        if call.item == "first" && call.attempt == 1 {
            json(500, serde_json::json!({"error": {"message": "try again"}}))
        } else {
            done()
        }
    })
    .await;
    let events = format!("{}/events", handler.url());
    let _p = traced(&db, &handler, &["--events-url", &events], &collector.env());
    db.wait_partition("p", "complete").await;
    let spans = collector
        .wait("the retry, the advance, the close and the event", |s| {
            named(s, "process").len() >= 3
                && !named(s, "advance gate").is_empty()
                && !named(s, "close").is_empty()
                && !named(s, "send").is_empty()
        })
        .await;

    let failed = named(&spans, "process")
        .into_iter()
        .find(|s| {
            s.attr("messaging.message.id").as_deref() == Some("first")
                && s.attr("feed.attempt").as_deref() == Some("1")
        })
        .expect("the failed attempt's span");
    assert_eq!(failed.attr("error.type").as_deref(), Some("error"));
    // The delivery's log lines are its span's events.
    assert!(
        failed
            .span
            .events
            .iter()
            .any(|e| e.name.contains("attempt failed; will retry")),
        "{:?}",
        failed.span.events
    );
    let status = failed.span.status.clone().unwrap_or_default();
    assert_eq!(status.code, 2, "status ERROR");
    let post = post_under(&spans, failed);
    assert_eq!(
        post.attr("http.response.status_code").as_deref(),
        Some("500")
    );
    assert_eq!(post.attr("error.type").as_deref(), Some("500"));
    let retried = named(&spans, "process")
        .into_iter()
        .find(|s| {
            s.attr("messaging.message.id").as_deref() == Some("first")
                && s.attr("feed.attempt").as_deref() == Some("2")
        })
        .expect("the retry's span");
    assert_eq!(retried.attr("error.type"), None);

    let advance = named(&spans, "advance gate")[0];
    assert_eq!(
        advance.attr("messaging.destination.name").as_deref(),
        Some("p")
    );
    assert_eq!(advance.attr("feed.gate").as_deref(), Some("0"));
    assert_eq!(advance.attr("feed.next_gate").as_deref(), Some("1"));
    let close = named(&spans, "close")[0];
    assert_eq!(
        close.attr("messaging.destination.name").as_deref(),
        Some("p")
    );

    let send = named(&spans, "send")[0];
    assert_eq!(send.span.kind, SpanKind::Producer as i32);
    assert_eq!(
        send.attr("feed.event").as_deref(),
        Some("partition.complete")
    );
    assert_eq!(
        send.attr("messaging.destination.name").as_deref(),
        Some("p")
    );
    let event = handler
        .ledger
        .lock()
        .iter()
        .find(|c| c.header("feed-event").is_some())
        .cloned()
        .expect("the event's call");
    assert_eq!(
        send.attr("messaging.message.id").as_deref(),
        event.header("idempotency-key")
    );
    assert_eq!(
        event.header("traceparent"),
        Some(tp(&send.trace(), &send.id(), true).as_str())
    );
}

backend_tests!(a_producer_that_does_not_sample_is_followed: sqlite => Sqlite);
async fn a_producer_that_does_not_sample_is_followed(db: TestDb) {
    let collector = Collector::start().await;
    let quiet = "ffffffffffffffffffffffffffffffff";
    let lines = format!(
        "{{\"id\": \"dropped\", \"data\": 1, \"traceparent\": \"{}\"}}\n\
         {{\"id\": \"kept\", \"data\": 2, \"traceparent\": \"{}\"}}\n",
        tp(quiet, PARENT, false),
        tp(TRACE, PARENT, true)
    );
    enqueue(&db, "p", &lines, &[]);
    let handler = Handler::start(|_| done()).await;
    let mut p = traced(&db, &handler, &[], &collector.env());
    db.wait_complete(2).await;
    // A graceful stop exports every span left: nothing is still queued.
    assert!(p.stop(Duration::from_secs(20)).await, "{}", p.log_tail(20));
    let spans = collector.spans.lock().clone();
    assert_eq!(process_of(&spans, "kept").trace(), TRACE);
    assert!(
        spans.iter().all(|s| s.trace() != quiet),
        "the default sampler (parentbased_always_on) follows an unsampled producer"
    );
    // The handler still joins the producer's trace, unsampled.
    let call = call_of(&handler, "dropped");
    let sent = call.header("traceparent").expect("a traceparent");
    assert!(
        sent.starts_with(&format!("00-{quiet}-")) && sent.ends_with("-00"),
        "{sent}"
    );
}

backend_tests!(the_cli_the_api_and_sql_carry_a_producers_trace: sqlite => Sqlite, mariadb => Mysql);
async fn the_cli_the_api_and_sql_carry_a_producers_trace(db: TestDb) {
    let (flag, line, header, column) = (
        tp(TRACE, "1111111111111111", true),
        tp(TRACE, "2222222222222222", true),
        tp(TRACE, "3333333333333333", true),
        tp(TRACE, "4444444444444444", true),
    );
    // The flag is for the lines without their own.
    let lines = format!(
        "{{\"id\": \"cli-flag\", \"data\": 1}}\n\
         {{\"id\": \"cli-line\", \"data\": 2, \"traceparent\": \"{line}\"}}\n"
    );
    enqueue(&db, "p", &lines, &["--traceparent", &flag]);
    let o = enqueue_cli(&db, "p", &["--traceparent", "00-nope"], "{\"data\": 1}\n");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("is not a W3C traceparent"),
        "{}",
        text(&o)
    );

    // The API's header is for the request's items without their own.
    let base = serve(db.store.clone(), None, Some(PRODUCER)).await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{base}/api/v1/partitions/p/items"))
        .bearer_auth(PRODUCER)
        .header("traceparent", &header)
        .body(format!(
            "{{\"id\": \"api-header\", \"data\": 3}}\n{{\"id\": \"api-line\", \"data\": 4, \"traceparent\": \"{line}\"}}\n"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (status, answer) = send(
        &base,
        "/api/v1/partitions/p/items",
        Some(PRODUCER),
        None,
        "{\"data\": 5}",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let bad = client
        .post(format!("{base}/api/v1/partitions/p/items"))
        .bearer_auth(PRODUCER)
        .header("traceparent", "01-xyz")
        .body("{\"id\": \"refused\", \"data\": 6}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let answer: serde_json::Value = serde_json::from_str(&bad.text().await.unwrap()).unwrap();
    assert!(
        message(&answer).contains("is not a W3C traceparent"),
        "{answer}"
    );

    // The library's NewItem.
    let library = tp(TRACE, "5555555555555555", true);
    let item = feed::store::NewItem::new(b"8".to_vec())
        .with_id("library")
        .in_trace(library.clone());
    db.store
        .enqueue("p", &feed::store::PartitionSpec::default(), vec![item])
        .await
        .unwrap();

    // An SQL producer writes the column.
    db.exec(
        "INSERT INTO feed_items (id, partition_id, gate, data, traceparent) VALUES (?, 'p', 0, ?, ?)",
        vec!["sql".into(), b"7".to_vec().into(), column.clone().into()],
    )
    .await;

    let collector = Collector::start().await;
    let handler = Handler::start(|_| done()).await;
    let _p = traced(&db, &handler, &[], &collector.env());
    db.wait_complete(7).await;
    let spans = collector
        .wait("every delivery", |s| named(s, "process").len() >= 7)
        .await;
    for (item, parent) in [
        ("cli-flag", &flag),
        ("cli-line", &line),
        ("api-header", &header),
        ("api-line", &line),
        ("library", &library),
        ("sql", &column),
    ] {
        let p = process_of(&spans, item);
        assert_eq!(tp(&p.trace(), &p.parent(), true), *parent, "{item}");
    }
    assert_eq!(
        db.count("SELECT COUNT(*) AS n FROM feed_items WHERE id = 'refused'")
            .await,
        0
    );
}

backend_tests!(with_tracing_off_nothing_is_exported_or_sent: sqlite => Sqlite);
async fn with_tracing_off_nothing_is_exported_or_sent(db: TestDb) {
    let collector = Collector::start().await;
    enqueue(
        &db,
        "p",
        &format!(
            "{{\"id\": \"a\", \"data\": 1, \"traceparent\": \"{}\"}}\n",
            tp(TRACE, PARENT, true)
        ),
        &[],
    );
    let handler = Handler::start(|_| done()).await;
    let mut env = collector.env();
    env.push(("OTEL_SDK_DISABLED", "true".into()));
    let mut p = traced(
        &db,
        &handler,
        &["--events-url", &format!("{}/events", handler.url())],
        &env,
    );
    db.wait_partition("p", "complete").await;
    wait_for("the event", Duration::from_secs(20), || async {
        handler
            .ledger
            .lock()
            .iter()
            .any(|c| c.header("feed-event").is_some())
    })
    .await;
    assert!(p.stop(Duration::from_secs(20)).await, "{}", p.log_tail(20));
    assert_eq!(collector.requests.load(Ordering::SeqCst), 0);
    for call in handler.ledger.lock().iter() {
        assert_eq!(call.header("traceparent"), None, "{:?}", call.headers);
    }
}

backend_tests!(the_standard_variables_configure_the_export: sqlite => Sqlite);
async fn the_standard_variables_configure_the_export(db: TestDb) {
    let collector = Collector::start().await;
    enqueue(&db, "p", "{\"id\": \"a\", \"data\": 1}\n", &[]);
    let handler = Handler::start(|_| done()).await;
    let traces = format!("{}/custom/traces", collector.url);
    let env = [
        // The traces endpoint is the full URL, and wins over the generic one.
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:9".to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".into()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret".into()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=test,service.name=from-attributes".into(),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
    ];
    let mut p = traced(&db, &handler, &[], &env);
    db.wait_complete(1).await;
    assert!(p.stop(Duration::from_secs(20)).await, "{}", p.log_tail(20));
    let received = collector.received.lock().clone();
    assert!(!received.is_empty(), "nothing was exported");
    let mut names = Vec::new();
    for r in &received {
        assert_eq!(r.path, "/custom/traces");
        let header = |n: &str| {
            r.headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        assert_eq!(header("x-api-key").as_deref(), Some("s3cret"));
        assert_eq!(header("content-type").as_deref(), Some("application/json"));
        let export: serde_json::Value = serde_json::from_slice(&r.body).expect("OTLP JSON");
        for rs in export["resourceSpans"].as_array().unwrap() {
            let resource: Vec<(String, String)> = rs["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| {
                    let v = &kv["value"]["stringValue"];
                    (
                        kv["key"].as_str().unwrap().to_string(),
                        v.as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            for want in [
                ("service.name", "from-attributes"),
                ("deployment.environment", "test"),
            ] {
                assert!(
                    resource
                        .iter()
                        .any(|(k, v)| (k.as_str(), v.as_str()) == want),
                    "{want:?} not in {resource:?}"
                );
            }
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for span in ss["spans"].as_array().unwrap() {
                    names.push(span["name"].as_str().unwrap().to_string());
                }
            }
        }
    }
    assert!(names.iter().any(|n| n == "process"), "{names:?}");
    assert!(names.iter().any(|n| n == "POST"), "{names:?}");
}

#[test]
fn an_unsupported_protocol_stops_run_with_what_to_use() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/f.db?mode=rwc", dir.path().display());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args([
            "run",
            "--database-url",
            &url,
            "--handler-url",
            "http://127.0.0.1:9/feed",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported; use http/protobuf"),
        "{}",
        text(&o)
    );
}

backend_tests!(the_endpoints_secrets_are_not_logged: sqlite => Sqlite);
/// `OTEL_EXPORTER_OTLP_ENDPOINT=http://u:pw@host:4318/?api_key=…` was
/// logged at start with its key (only the user and password were
/// dropped): both endpoint variables are masked as the handler URL is,
/// and so is one the exporter cannot take, in the error that stops `run`.
async fn the_endpoints_secrets_are_not_logged(db: TestDb) {
    let collector = Collector::start().await;
    let handler = Handler::start(|_| done()).await;
    let with_secrets = |path: &str| {
        format!("{path}?api_key=otlp-key-s3cret&region=eu")
            .replace("http://", "http://user:otlp-pw-s3cret@")
    };
    for (var, url) in [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            with_secrets(&format!("{}/", collector.url)),
        ),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            with_secrets(&format!("{}/v1/traces", collector.url)),
        ),
    ] {
        let mut p = traced(&db, &handler, &[], &[(var, url)]);
        wait_for("the start-up lines", Duration::from_secs(30), || async {
            p.log().contains("processor started")
        })
        .await;
        assert!(p.stop(Duration::from_secs(20)).await, "{}", p.log_tail(20));
        let log = p.log();
        let line = log
            .lines()
            .find(|l| l.contains("exporting traces"))
            .unwrap_or_else(|| panic!("no start-up line:\n{log}"));
        assert!(
            line.contains("user:***@") && line.contains("api_key=***&region=eu"),
            "{var}: {line}"
        );
        for secret in ["otlp-key-s3cret", "otlp-pw-s3cret"] {
            assert!(!log.contains(secret), "{var}: {secret} in the log:\n{log}");
        }
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
        .args([
            "run",
            "--database-url",
            &db.url,
            "--handler-url",
            &handler.url(),
        ])
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://user:otlp-pw-s3cret@exa mple/?api_key=otlp-key-s3cret",
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("OTLP"), "{}", text(&o));
    for secret in ["otlp-key-s3cret", "otlp-pw-s3cret"] {
        assert!(!text(&o).contains(secret), "{secret}: {}", text(&o));
    }
    // Nor do the handler's and the events' URLs when they do not parse.
    let bad = "http://user:pw-s3cret@[::1/feed?api_key=key-s3cret";
    for flags in [
        vec!["--handler-url", bad],
        vec![
            "--handler-url",
            "http://127.0.0.1:9/feed",
            "--events-url",
            bad,
        ],
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_processor"))
            .args(["run", "--database-url", &db.url])
            .args(&flags)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("is not a URL"), "{}", text(&o));
        for secret in ["key-s3cret", "pw-s3cret"] {
            assert!(!text(&o).contains(secret), "{secret}: {}", text(&o));
        }
    }
}
