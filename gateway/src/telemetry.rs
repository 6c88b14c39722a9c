//! Logging and tracing setup. Human-readable lines by default, JSON lines with
//! `TROUPE_LOG_FORMAT=json`; the filter is `RUST_LOG`-style (`TROUPE_LOG` or `RUST_LOG`).
//!
//! With the `otlp` Cargo feature, spans are also exported over OTLP/HTTP (protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, to `<endpoint>/v1/traces` as the OpenTelemetry
//! specification builds it. The feature is off by default: the exporter and its protobuf
//! types are a large build that most deployments and CI do not need. The same filter
//! governs logs and exported spans, so a span that is not logged is not exported either.

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
}

impl Export {
    pub(crate) fn from_config(config: &crate::config::Config) -> Self {
        Export {
            endpoint: config.otlp_endpoint.clone(),
            service_name: config.otel_service_name.clone(),
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
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if json {
        fmt.json().flatten_event(true).boxed()
    } else {
        fmt.boxed()
    };
    let (otel, guard) = otel_layer(export);
    let mut layers: Vec<Boxed> = vec![fmt];
    layers.extend(otel);
    // The filter is global: it applies to the log and the export alike.
    // A second init (tests) is harmless.
    let _ = tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init();
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
    use opentelemetry_otlp::WithExportConfig;

    let Some(endpoint) = &export.endpoint else {
        return (None, Guard { provider: None });
    };
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("troupe: cannot export traces to {url}: {e}; running without");
            return (None, Guard { provider: None });
        }
    };
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(export.service_name.clone())
        .build();
    // The batch processor exports from its own thread, off the request path.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("troupe");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).boxed();
    (
        Some(layer),
        Guard {
            provider: Some(provider),
        },
    )
}
