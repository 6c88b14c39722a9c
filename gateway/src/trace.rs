//! The spans of a turn, for OpenTelemetry (issue 47, docs/observability.md): what they are
//! called, what they carry, and how their context crosses the bus.
//!
//! A turn is one trace: `receive` (the connector or the HTTP API hands a message in) →
//! `journal` → (the bus) → `handle` → `decide` → `recall` → `chat {model}` (the model call,
//! with OpenTelemetry's GenAI attributes) → `send`. The spans have their own target,
//! [`TARGET`], which only the exporter's layer enables (`telemetry`): the log never shows
//! them, and with no exporter configured every one of them is a disabled callsite, whose
//! fields are never evaluated. The W3C `traceparent` of the publishing span rides in the
//! envelope (a NATS header on a shared bus), so a message handled on another replica stays
//! in its trace.
//!
//! Nothing private leaves: spans name the persona, the platform, the model and the token
//! counts, never a message's text, a prompt or a tool's arguments, unless the operator
//! turns on `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` (the GenAI convention's
//! own switch); then the model span carries `gen_ai.input.messages` and
//! `gen_ai.output.messages`.

use std::sync::atomic::{AtomicBool, Ordering};
use troupe_connectors::{AgentId, Platform};

/// The target of every span here; enabled only in the exporter's layer.
pub const TARGET: &str = "troupe_trace";

static ON: AtomicBool = AtomicBool::new(false);
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Spans are exported from now on (`telemetry::init`, once); `capture`: with the text.
pub(crate) fn turn_on(capture: bool) {
    CAPTURE.store(capture, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// Whether spans are exported at all.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether message text, prompts and completions go into spans.
pub fn capture_content() -> bool {
    CAPTURE.load(Ordering::Relaxed)
}

/// The W3C `traceparent` of the current span, to carry across the bus; `None` when
/// nothing is exported (then this costs one atomic load).
pub fn traceparent() -> Option<String> {
    if !on() {
        return None;
    }
    otel::traceparent()
}

/// Makes `span` a child of the span a `traceparent` names (from another replica, or from
/// this one's ingress before the bus).
pub fn adopt(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(tp) = traceparent
        && on()
    {
        otel::adopt(span, tp);
    }
}

#[cfg(feature = "otlp")]
mod otel {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use std::collections::HashMap;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    pub(super) fn traceparent() -> Option<String> {
        let cx = tracing::Span::current().context();
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        carrier.remove("traceparent")
    }

    pub(super) fn adopt(span: &tracing::Span, traceparent: &str) {
        let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
        let cx = TraceContextPropagator::new().extract(&carrier);
        let _ = span.set_parent(cx);
    }
}

#[cfg(not(feature = "otlp"))]
mod otel {
    pub(super) fn traceparent() -> Option<String> {
        None
    }

    pub(super) fn adopt(_: &tracing::Span, _: &str) {}
}

/// The model call's span, named and attributed as the GenAI semantic conventions say:
/// `{gen_ai.operation.name} {gen_ai.request.model}`, a client span.
pub fn model_span(
    operation: &'static str,
    provider: &str,
    model: &str,
    purpose: &str,
) -> tracing::Span {
    tracing::info_span!(target: "troupe_trace", "model",
        otel.name = %format_args!("{operation} {model}"),
        otel.kind = "client",
        gen_ai.operation.name = operation,
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.input.messages = tracing::field::Empty,
        gen_ai.output.messages = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        troupe.purpose = %purpose,
    )
}

/// The GenAI convention's messages attribute for one text, as JSON.
pub fn messages(role: &str, text: &str) -> String {
    serde_json::json!([{"role": role, "parts": [{"type": "text", "content": text}]}]).to_string()
}

/// The span of a message handed in (`receive`): a root, or the caller's.
pub fn receive_span(agent: &AgentId, platform: Platform) -> tracing::Span {
    tracing::info_span!(target: "troupe_trace", "receive",
        otel.kind = "server",
        troupe.agent = %agent,
        troupe.platform = platform.as_str(),
    )
}

/// The span of a message handled (`handle`), a child of its `receive` through the bus.
pub fn handle_span(
    agent: &AgentId,
    platform: Platform,
    traceparent: Option<&str>,
) -> tracing::Span {
    let span = tracing::info_span!(target: "troupe_trace", "handle",
        otel.kind = "consumer",
        troupe.agent = %agent,
        troupe.platform = platform.as_str(),
        troupe.decision = tracing::field::Empty,
    );
    adopt(&span, traceparent);
    span
}
