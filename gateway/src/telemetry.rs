//! Logging and tracing setup. Human-readable lines by default, JSON lines with
//! `TROUPE_LOG_FORMAT=json`; the filter is `RUST_LOG`-style (`TROUPE_LOG` or `RUST_LOG`).
//!
//! Traces (issue 47, docs/observability.md): with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the
//! turn's spans (`crate::trace`) are exported over OTLP/HTTP (protobuf) to
//! `<endpoint>/v1/traces`, as the OpenTelemetry specification builds it, through the
//! official crates (`opentelemetry_sdk`'s batch processor, `opentelemetry-otlp`,
//! `tracing-opentelemetry`; the `otlp` Cargo feature, on by default). The sampler is the
//! SDK's, from `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` (parent-based, always on,
//! by default).
//!
//! Decisions:
//! - **Two filters.** The log keeps its own filter; the exporter's layer enables only the
//!   turn's spans (target `troupe_trace`), which the log never shows. Without an endpoint
//!   no layer enables them: each is a disabled callsite, and a message costs what it did.
//! - **Off the message path.** Spans are queued to the batch processor's own thread, which
//!   exports them; the HTTP request runs on a small runtime of that thread's own, never on
//!   the gateway's. A collector down or slow (10 s at most per export) costs the batch: its
//!   spans are dropped and counted (`troupe_otel_spans_dropped_total`). When spans come
//!   faster than they leave (a slow collector), at most `OTEL_BSP_MAX_QUEUE_SIZE` (2,048)
//!   wait; the excess is dropped at once and counted too. The SDK's processor drops its
//!   excess silently, so troupe keeps the bound in front of it (`otlp::Bounded`) and never
//!   lets its queue fill.
//! - **Protocol.** `OTEL_EXPORTER_OTLP_PROTOCOL` may be `http/protobuf` (the default) only;
//!   another value is said at start and protobuf is used.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where spans go besides the log, read from the configuration.
#[derive(Debug, Clone, Default)]
pub(crate) struct Export {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL (`http://collector:4318`).
    pub endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME`.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub service_name: String,
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: prompts and answers in spans.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub capture_content: bool,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` when it is not `http/protobuf`.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub protocol: Option<String>,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans that may wait for the collector.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub queue: usize,
}

impl Export {
    pub(crate) fn from_config(config: &crate::config::Config) -> Self {
        Export {
            endpoint: config.otlp_endpoint.clone(),
            service_name: config.otel_service_name.clone(),
            capture_content: config.otel_capture_content,
            protocol: config
                .otel_protocol
                .clone()
                .filter(|p| p.trim() != "http/protobuf"),
            queue: config.otel_queue,
        }
    }
}

/// Keeps the exporter alive; dropping it sends the spans still buffered. Hold it for the
/// life of the process.
#[must_use = "dropping the guard stops the span export"]
pub(crate) struct Guard {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("troupe: could not send the last traces: {e}");
        }
    }
}

pub(crate) fn init(filter: &str, json: bool, export: &Export) -> Guard {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // The turn's spans are the exporter's, never the log's.
    let filter = match format!("{}=off", crate::trace::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if json {
        fmt.json().flatten_event(true).with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let (otel, guard) = otel_layer(export);
    let mut layers: Vec<Boxed> = vec![fmt];
    layers.extend(otel);
    // A second init (tests) is harmless.
    let _ = tracing_subscriber::registry().with(layers).try_init();
    guard
}

type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

#[cfg(not(feature = "otlp"))]
fn otel_layer(export: &Export) -> (Option<Boxed>, Guard) {
    if export.endpoint.is_some() {
        // Said on stderr before logging exists; not an error: the gateway runs without it.
        eprintln!(
            "troupe: OTEL_EXPORTER_OTLP_ENDPOINT is set, but this build has no OTLP export \
             (build with `--features otlp`); traces are not exported"
        );
    }
    (None, Guard {})
}

#[cfg(feature = "otlp")]
fn otel_layer(export: &Export) -> (Option<Boxed>, Guard) {
    use opentelemetry::trace::TracerProvider as _;

    let Some(endpoint) = &export.endpoint else {
        return (None, Guard { provider: None });
    };
    if let Some(other) = &export.protocol {
        eprintln!(
            "troupe: OTEL_EXPORTER_OTLP_PROTOCOL is `{other}`; troupe exports http/protobuf only, \
             and uses it"
        );
    }
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = match otlp::exporter(&url, export.queue) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("troupe: cannot export traces to {url}: {e}; running without");
            return (None, Guard { provider: None });
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(export.service_name.clone())
        .build();
    // The batch processor exports from its own thread, off the message path.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(otlp::processor(exporter, export.queue))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("troupe");
    let only_turns = tracing_subscriber::filter::Targets::new()
        .with_target(crate::trace::TARGET, tracing::Level::TRACE);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(only_turns)
        .boxed();
    crate::trace::turn_on(export.capture_content);
    (
        Some(layer),
        Guard {
            provider: Some(provider),
        },
    )
}

/// The exporter's parts: an HTTP client that runs off the gateway's runtime, and an
/// exporter that counts the spans it could not deliver.
#[cfg(feature = "otlp")]
mod otlp {
    use opentelemetry::Context;
    use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{
        BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
    };
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// The longest one export may take: the specification's default timeout.
    const TIMEOUT: Duration = Duration::from_secs(10);

    /// reqwest (the workspace's async client) on a current-thread runtime of the batch
    /// processor's thread: an export blocks that thread, never a gateway worker.
    #[derive(Debug)]
    struct OwnRuntime {
        client: reqwest::Client,
        runtime: tokio::runtime::Runtime,
    }

    #[async_trait::async_trait]
    impl HttpClient for OwnRuntime {
        async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
            self.runtime
                .block_on(HttpClient::send_bytes(&self.client, request))
        }
    }

    /// The exporter, counting what it drops and what has left the queue.
    #[derive(Debug)]
    pub(super) struct Counting {
        inner: opentelemetry_otlp::SpanExporter,
        waiting: Arc<Waiting>,
    }

    impl SpanExporter for Counting {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let n = batch.len();
            // Out of the queue from here on: room for as many new spans.
            self.waiting.left(n);
            let result = self.inner.export(batch).await;
            if result.is_err() {
                crate::metrics::spans_dropped(n);
            }
            result
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.inner.shutdown_with_timeout(timeout)
        }

        fn force_flush(&self) -> OTelSdkResult {
            self.inner.force_flush()
        }

        fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
            self.inner.set_resource(resource);
        }
    }

    /// How many ended spans wait for the exporter, against the bound.
    #[derive(Debug)]
    pub(super) struct Waiting {
        count: AtomicUsize,
        bound: usize,
    }

    impl Waiting {
        pub(super) fn new(bound: usize) -> Arc<Self> {
            Arc::new(Waiting {
                count: AtomicUsize::new(0),
                bound,
            })
        }

        /// Takes a place in the queue, or says there is none.
        fn enter(&self) -> bool {
            self.count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.bound).then_some(n + 1)
                })
                .is_ok()
        }

        pub(super) fn left(&self, n: usize) {
            let _ = self
                .count
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                    Some(c.saturating_sub(n))
                });
        }
    }

    /// The batch processor behind a bound of troupe's own: a span that finds the queue full
    /// is dropped here, and counted, instead of silently inside the SDK. The SDK's queue is
    /// as long as the bound, so it never fills.
    #[derive(Debug)]
    pub(super) struct Bounded<P> {
        pub(super) inner: P,
        pub(super) waiting: Arc<Waiting>,
        pub(super) dropped: fn(usize),
    }

    impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
        fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
            self.inner.on_start(span, cx);
        }

        fn on_end(&self, span: SpanData) {
            if self.waiting.enter() {
                self.inner.on_end(span);
            } else {
                (self.dropped)(1);
            }
        }

        fn force_flush(&self) -> OTelSdkResult {
            self.inner.force_flush()
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.inner.shutdown_with_timeout(timeout)
        }

        fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
            self.inner.set_resource(resource);
        }
    }

    pub(super) fn exporter(url: &str, queue: usize) -> anyhow::Result<Counting> {
        let client = troupe_connectors::tls::http_client()
            .timeout(TIMEOUT)
            .build()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OwnRuntime { client, runtime })
            .with_endpoint(url)
            .with_timeout(TIMEOUT)
            .build()?;
        Ok(Counting {
            inner: exporter,
            waiting: Waiting::new(queue),
        })
    }

    pub(super) fn processor(exporter: Counting, queue: usize) -> Bounded<BatchSpanProcessor> {
        let waiting = exporter.waiting.clone();
        let config = BatchConfigBuilder::default()
            .with_max_queue_size(queue)
            .build();
        Bounded {
            inner: BatchSpanProcessor::builder(exporter)
                .with_batch_config(config)
                .build(),
            waiting,
            dropped: crate::metrics::spans_dropped,
        }
    }
}

#[cfg(all(test, feature = "otlp"))]
mod tests {
    use super::otlp::{Bounded, Waiting};
    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Takes every span it is given and never exports: a collector that does not answer.
    #[derive(Debug, Default)]
    struct Stuck(Arc<AtomicUsize>);

    impl SpanProcessor for Stuck {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
        fn on_end(&self, _: SpanData) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    fn count(n: usize) {
        DROPPED.fetch_add(n, Ordering::SeqCst);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_an_export_makes_room() {
        let queued = Arc::new(AtomicUsize::new(0));
        let waiting = Waiting::new(2);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: Stuck(queued.clone()),
                waiting: waiting.clone(),
                dropped: count,
            })
            .build();
        let tracer = provider.tracer("test");
        for _ in 0..5 {
            tracer.start("turn").end();
        }
        assert_eq!(queued.load(Ordering::SeqCst), 2, "two wait: the bound");
        assert_eq!(DROPPED.load(Ordering::SeqCst), 3, "the rest are counted");
        // The exporter takes both: room for two more.
        waiting.left(2);
        for _ in 0..3 {
            tracer.start("turn").end();
        }
        assert_eq!(queued.load(Ordering::SeqCst), 4);
        assert_eq!(DROPPED.load(Ordering::SeqCst), 4);
    }
}
