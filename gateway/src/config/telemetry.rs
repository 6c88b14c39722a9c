//! Logs and telemetry: the log filter and format (`TROUPE_LOG`, `TROUPE_LOG_FORMAT`) and
//! where spans are exported (the OpenTelemetry names, `OTEL_*`).

use super::{FileConfig, Layered};

/// The log filter and format.
pub(super) struct LogSettings {
    pub(super) filter: String,
    pub(super) filter_set: bool,
    pub(super) json: bool,
}

/// `TROUPE_LOG` (else `RUST_LOG`, else troupe.toml's `log`) and `TROUPE_LOG_FORMAT`. An
/// empty filter in the environment is kept as given, as before the file could set it.
pub(super) fn log_settings(layered: &Layered<'_>, file: &mut FileConfig) -> LogSettings {
    let env = layered.env;
    let filter = env
        .get("TROUPE_LOG")
        .or_else(|| env.get("RUST_LOG"))
        .cloned()
        .or(file.log.take());
    LogSettings {
        filter_set: filter.is_some(),
        filter: filter.unwrap_or_else(|| "info,sqlx=warn".into()),
        json: layered
            .string("TROUPE_LOG_FORMAT", file.log_format.take())
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("json")),
    }
}

/// Where spans go: the OpenTelemetry names.
pub(super) struct OtelSettings {
    pub(super) endpoint: Option<String>,
    pub(super) service: String,
    pub(super) protocol: Option<String>,
    pub(super) capture_content: bool,
    pub(super) queue: usize,
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` and `OTEL_BSP_MAX_QUEUE_SIZE` (the
/// OpenTelemetry names).
pub(super) fn otel_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<OtelSettings> {
    let endpoint = layered
        .string(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            file.otel_exporter_otlp_endpoint.take(),
        )
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let service = layered
        .string("OTEL_SERVICE_NAME", file.otel_service_name.take())
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "troupe".into());
    let protocol = layered
        .string(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            file.otel_exporter_otlp_protocol.take(),
        )
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let capture_content = layered.parse(
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        file.otel_instrumentation_genai_capture_message_content
            .take(),
        false,
    )?;
    // The SDK's default; at least one span, so that a zero is not a queue that drops all.
    let queue: usize = layered.parse(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        file.otel_bsp_max_queue_size.take(),
        2_048,
    )?;
    Ok(OtelSettings {
        endpoint,
        service,
        protocol,
        capture_content,
        queue: queue.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use crate::config::Config;

    #[test]
    fn otel_settings_use_the_standard_names() {
        let c = Config::for_test();
        assert_eq!(c.otlp_endpoint, None);
        assert_eq!(c.otel_service_name, "troupe");
        let c = Config::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", " http://collector:4318 "),
            ("OTEL_SERVICE_NAME", "troupe-eu"),
        ]))
        .unwrap();
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(c.otel_service_name, "troupe-eu");
        let c = Config::from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])).unwrap();
        assert_eq!(c.otlp_endpoint, None);
    }
}
