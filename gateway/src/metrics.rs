//! Metrics: what `GET /metrics` shows, in the Prometheus text format.
//!
//! The `metrics` facade is called where things happen (ingress, agent, outbox); this module
//! installs the recorder once per process and names every series in one place, so the
//! names stay stable for dashboards.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;
use troupe_connectors::Platform;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (once; later calls return the same handle).
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ])
                .ok()?;
            builder.install_recorder().ok()
        })
        .clone()
}

/// A message reached the journal (`new`) or was refused as a redelivery (`duplicate`).
pub fn message_in(platform: Platform, new: bool) {
    metrics::counter!("troupe_messages_in_total", "platform" => platform.as_str(),
        "result" => if new { "new" } else { "duplicate" })
    .increment(1);
}

/// A reply left through a connector.
pub fn message_out(platform: Platform) {
    metrics::counter!("troupe_messages_out_total", "platform" => platform.as_str()).increment(1);
}

/// What the agent decided: `responded`, `ignored`, `rate_limited`, `failed`.
pub fn decision(platform: Platform, decision: &'static str) {
    metrics::counter!("troupe_decisions_total", "platform" => platform.as_str(),
        "decision" => decision)
    .increment(1);
}

/// One model call: its latency, and the tokens it used when the provider says.
pub fn model_call(
    provider: &str,
    latency: Duration,
    ok: bool,
    prompt: Option<u32>,
    completion: Option<u32>,
) {
    let provider = provider.to_string();
    metrics::histogram!("troupe_model_latency_seconds", "provider" => provider.clone(),
        "result" => if ok { "ok" } else { "error" })
    .record(latency.as_secs_f64());
    if let Some(t) = prompt {
        metrics::counter!("troupe_model_tokens_total", "provider" => provider.clone(), "kind" => "prompt")
            .increment(u64::from(t));
    }
    if let Some(t) = completion {
        metrics::counter!("troupe_model_tokens_total", "provider" => provider, "kind" => "completion")
            .increment(u64::from(t));
    }
}

/// A delivery that will be tried again, or was given up.
pub fn outbox_retry(gave_up: bool) {
    if gave_up {
        metrics::counter!("troupe_outbox_failures_total").increment(1);
    } else {
        metrics::counter!("troupe_outbox_retries_total").increment(1);
    }
}

/// An error worth an alert: `storage`, `connector`, `bus`.
pub fn error(kind: &'static str) {
    metrics::counter!("troupe_errors_total", "kind" => kind).increment(1);
}

/// Messages queued on the bus, sampled when /metrics is read.
pub fn bus_depth(depth: usize) {
    metrics::gauge!("troupe_bus_depth").set(depth as f64);
}

/// The keyword index's catch-up (knowledge/index.rs): changes of the database not yet
/// applied by this replica, and whether a rebuild is under way.
pub fn knowledge_index(lag: i64, rebuilding: bool) {
    metrics::gauge!("troupe_knowledge_index_lag").set(lag as f64);
    metrics::gauge!("troupe_knowledge_index_rebuilding").set(if rebuilding { 1.0 } else { 0.0 });
}
