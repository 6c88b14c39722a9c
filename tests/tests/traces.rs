//! OpenTelemetry traces (issue 47, docs/observability.md), end to end: the real `troupe run`
//! exporting OTLP/HTTP to a fake collector that decodes the official protobufs
//! (`tests/collector/otlp.py`, PyPI `opentelemetry-proto`). One message is one trace with
//! the turn's spans and the GenAI attributes, and no message text leaves; with the
//! collector down, messages are answered as before and the dropped spans are counted.
//! Waits are on the collector's spans and the gateway's counters, never a sleep.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually};

/// A hang guard on waiting, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);
const AGENT: &str = "Ada";
const SECRET: &str = "my locker code is 4711 and my cat is Marmalade";
const ANSWER: &str = "Noted, and kept to myself: harbour rules.";

/// The fake collector: its process and its base URL.
struct Collector {
    _child: Child,
    url: String,
}

/// Starts the collector; `None` when its protobufs are not installed (a failure in CI).
async fn collector() -> Option<Collector> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/collector/otlp.py");
    let probe = std::process::Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        assert!(
            !troupe_e2e::env::in_ci(),
            "`python3 -m pip install opentelemetry-proto` (.ci/run does)"
        );
        eprintln!("skipping: PyPI opentelemetry-proto is not installed");
        return None;
    }
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs the collector");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).await.unwrap();
    let port = line.trim().strip_prefix("listening ").expect("the port");
    Some(Collector {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

impl Collector {
    async fn received(&self) -> Value {
        reqwest::get(format!("{}/spans", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

fn options(openai: &FakeOpenAi, endpoint: &str) -> TestAppOptions {
    TestAppOptions::new(Backend::Sqlite)
        .persona(AGENT, "Ada keeps the harbour's records.")
        .openai(openai)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "troupe-test")
        // The batch processor's delay, in ms (the SDK reads it): spans leave at once.
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0")
}

fn named<'a>(spans: &'a [Value], name: &str) -> Option<&'a Value> {
    spans.iter().find(|s| s["name"] == name)
}

#[tokio::test]
async fn one_message_is_one_trace_with_genai_attributes_and_no_text() {
    let Some(collector) = collector().await else {
        return;
    };
    let openai = FakeOpenAi::start().await;
    openai.set_usage(120, 30);
    openai.push_reply(ANSWER);
    let app = TestApp::spawn(options(&openai, &collector.url)).await;
    let (status, body) = app.post_message(AGENT, &json!({"text": SECRET})).await;
    assert_eq!(status, 200, "{body}");

    let wanted = ["receive", "journal", "handle", "decide", "recall", "send"];
    let last = std::sync::Mutex::new(Value::Null);
    eventually("the turn's spans at the collector", WAIT, || async {
        let got = collector.received().await;
        let spans = got["spans"].as_array().cloned().unwrap_or_default();
        *last.lock().unwrap() = got;
        wanted.iter().all(|n| named(&spans, n).is_some())
            && spans
                .iter()
                .any(|s| s["name"].as_str().is_some_and(|n| n.starts_with("chat ")))
    })
    .await;
    let received = last.into_inner().unwrap();
    let spans = received["spans"].as_array().unwrap();
    let receive = named(spans, "receive").unwrap();
    let trace = receive["traceId"].as_str().unwrap();
    assert_eq!(receive["parentSpanId"], "", "receive is the root");
    let model = spans
        .iter()
        .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with("chat ")))
        .unwrap();
    for span in wanted.iter().filter_map(|n| named(spans, n)).chain([model]) {
        assert_eq!(span["traceId"], trace, "one trace: {span}");
    }
    let handle = named(spans, "handle").unwrap();
    assert_eq!(
        handle["parentSpanId"], receive["spanId"],
        "handle follows receive"
    );
    for step in ["decide", "recall", "send"] {
        assert_eq!(
            named(spans, step).unwrap()["parentSpanId"],
            handle["spanId"],
            "{step}"
        );
    }
    let a = &model["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "chat", "{model}");
    assert_eq!(a["gen_ai.provider.name"], "openai", "{model}");
    let name = format!("chat {}", a["gen_ai.request.model"].as_str().unwrap());
    assert_eq!(model["name"], name.as_str());
    assert_eq!(a["gen_ai.usage.input_tokens"], 120, "{model}");
    assert_eq!(a["gen_ai.usage.output_tokens"], 30, "{model}");
    assert_eq!(model["kind"], 3, "a client span: {model}");
    assert_eq!(receive["resource"]["service.name"], "troupe-test");
    // Nothing private left: not the message, not the answer, not in any byte sent.
    let raw = received["raw"].as_str().unwrap();
    for text in [SECRET, "4711", "Marmalade", ANSWER] {
        assert!(!raw.contains(text), "`{text}` was exported");
    }
}

#[tokio::test]
async fn with_the_collector_down_messages_are_answered_and_dropped_spans_counted() {
    let openai = FakeOpenAi::start().await;
    openai.push_reply(ANSWER);
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = TestApp::spawn(options(&openai, &format!("http://127.0.0.1:{port}"))).await;
    let (status, body) = app.post_message(AGENT, &json!({"text": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replies"][0]["text"], ANSWER, "{body}");
    eventually("dropped spans counted on /metrics", WAIT, || async {
        let text = app
            .client()
            .get(app.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines().any(|l| {
            l.starts_with("troupe_otel_spans_dropped_total")
                && l.split_whitespace()
                    .last()
                    .and_then(|n| n.parse::<f64>().ok())
                    > Some(0.0)
        })
    })
    .await;
}

/// Two replicas on one Postgres and NATS, exporting as `troupe-a` and `troupe-b`: messages
/// posted to `a` and handled by `b` are one trace, `b`'s `handle` a child of `a`'s `receive`.
#[tokio::test]
async fn a_message_handled_on_another_replica_stays_one_trace() {
    let test = "a_message_handled_on_another_replica_stays_one_trace";
    let Some(nats) = troupe_e2e::env::nats_url(test) else {
        return;
    };
    if Backend::Postgres.or_skip(test).is_none() {
        return;
    }
    let Some(collector) = collector().await else {
        return;
    };
    let openai = FakeOpenAi::start().await;
    let mut options = options(&openai, &collector.url);
    options = TestAppOptions {
        backend: Backend::Postgres,
        ..options
    }
    .env("TROUPE_BUS_URL", &nats)
    .env(
        "TROUPE_BUS_PREFIX",
        &format!("traces{}", std::process::id()),
    )
    .env("TROUPE_BUS_PARTITIONS", "16")
    .env("OTEL_SERVICE_NAME", "troupe-a");
    let a = TestApp::spawn(options).await;
    let b = TestApp::spawn(a.replica_options().env("OTEL_SERVICE_NAME", "troupe-b")).await;
    for i in 0..16 {
        let (status, body) = a
            .post_message(AGENT, &json!({"text": "hello", "roomId": format!("r{i}")}))
            .await;
        assert_eq!(status, 200, "{body}\n{}", b.logs());
    }
    eventually("a trace received on a and handled on b", WAIT, || async {
        let got = collector.received().await;
        let spans = got["spans"].as_array().cloned().unwrap_or_default();
        let service = |s: &Value| s["resource"]["service.name"].as_str().map(str::to_string);
        spans
            .iter()
            .filter(|s| s["name"] == "handle")
            .any(|handle| {
                service(handle).as_deref() == Some("troupe-b")
                    && spans.iter().any(|r| {
                        r["name"] == "receive"
                            && service(r).as_deref() == Some("troupe-a")
                            && r["spanId"] == handle["parentSpanId"]
                            && r["traceId"] == handle["traceId"]
                    })
            })
    })
    .await;
}
