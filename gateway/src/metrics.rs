//! Metrics: what `GET /metrics` shows, in the Prometheus text format.
//!
//! The `metrics` facade is called where things happen (ingress, agent, outbox); this module
//! installs the recorder once per process and names every series in one place, so the
//! names stay stable for dashboards.

use metrics::Counter;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock, RwLock};
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

/// One tool call (issue 33): by persona, tool (`server.tool`) and outcome (`ok`, `error`,
/// `timeout`, `refused`). The tool's name comes from the operator's allowed servers.
pub fn tool_call(persona: &str, tool: &str, outcome: &'static str) {
    metrics::counter!("troupe_tool_calls_total", "persona" => persona.to_string(),
        "tool" => tool.to_string(), "outcome" => outcome)
    .increment(1);
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
/// An edit or a delete of a message (issue 32), by what came of it: `rerun`, `too_late`,
/// `unknown`, `deleted`.
pub fn revision(platform: Platform, change: &'static str, outcome: &'static str) {
    metrics::counter!("troupe_revisions_total", "platform" => platform.as_str(),
        "change" => change, "outcome" => outcome)
    .increment(1);
}

/// Spans the trace exporter could not deliver (the collector down, slow or refusing).
pub fn spans_dropped(n: usize) {
    metrics::counter!("troupe_otel_spans_dropped_total").increment(n as u64);
}

pub fn error(kind: &'static str) {
    metrics::counter!("troupe_errors_total", "kind" => kind).increment(1);
}

/// Messages queued on the bus, sampled when /metrics is read.
pub fn bus_depth(depth: usize) {
    metrics::gauge!("troupe_bus_depth").set(depth as f64);
}

// --- spend (issue 16, docs/spend.md) ----------------------------------------------------------

/// One model call's accounted usage, per persona, provider and purpose (`reply`, `summary`,
/// `facts`, `embedding`): calls, tokens by kind, and cost in micro-dollars.
pub fn model_usage(
    persona: &troupe_connectors::AgentId,
    provider: &str,
    purpose: &'static str,
    prompt: u64,
    completion: u64,
    cached: u64,
    cost_micros: i64,
) {
    let count = |series: &UsageSeries| {
        series.calls.increment(1);
        series.prompt.increment(prompt);
        series.completion.increment(completion);
        series.cached.increment(cached);
        series
            .cost
            .increment(u64::try_from(cost_micros).unwrap_or(0));
    };
    let key = (persona.as_str(), provider, purpose);
    if !registered(key, &count) {
        count(&UsageSeries::register(key));
    }
}

/// The five series of one persona, provider and purpose (`model_usage`).
struct UsageSeries {
    calls: Counter,
    prompt: Counter,
    completion: Counter,
    cached: Counter,
    cost: Counter,
}

impl UsageSeries {
    fn register((persona, provider, purpose): (&str, &str, &'static str)) -> UsageSeries {
        let (persona, provider) = (persona.to_string(), provider.to_string());
        let tokens = |kind: &'static str| {
            metrics::counter!("troupe_usage_tokens_total", "persona" => persona.clone(),
                "provider" => provider.clone(), "purpose" => purpose, "kind" => kind)
        };
        UsageSeries {
            calls: metrics::counter!("troupe_usage_calls_total", "persona" => persona.clone(),
                "provider" => provider.clone(), "purpose" => purpose),
            prompt: tokens("prompt"),
            completion: tokens("completion"),
            cached: tokens("cached"),
            cost: metrics::counter!("troupe_usage_cost_micros_total", "persona" => persona.clone(),
                "provider" => provider.clone(), "purpose" => purpose),
        }
    }
}

/// Series registered once per persona, provider and purpose. Every model call records its
/// usage, and naming the series afresh each time (its labels as owned strings, then a hashed
/// lookup in the registry) was ten allocations and five lookups a call, 1.8% of a tokio
/// worker's CPU under 16 HTTP clients. The label sets are the operator's (personas,
/// providers, a fixed list of purposes), so the map stays small.
type UsageMap = HashMap<String, HashMap<String, HashMap<&'static str, UsageSeries>>>;
static USAGE: LazyLock<RwLock<UsageMap>> = LazyLock::new(Default::default);

/// Runs `count` on the series registered for `key`, registering them the first time; false
/// (and nothing counted) when no recorder is installed yet: a handle taken then would count
/// nowhere for ever, so nothing is kept until `install` has run.
fn registered(key: (&str, &str, &'static str), count: &dyn Fn(&UsageSeries)) -> bool {
    if !HANDLE.get().is_some_and(Option::is_some) {
        return false;
    }
    let (persona, provider, purpose) = key;
    {
        let read = USAGE
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let known = read.get(persona).and_then(|p| p.get(provider));
        if let Some(series) = known.and_then(|p| p.get(purpose)) {
            count(series);
            return true;
        }
    }
    let mut write = USAGE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let by_purpose = write
        .entry(persona.to_string())
        .or_default()
        .entry(provider.to_string())
        .or_default();
    count(
        by_purpose
            .entry(purpose)
            .or_insert_with(|| UsageSeries::register(key)),
    );
    true
}

/// A model call refused because a budget is spent (`user_day`, `room_day`, `persona_day`,
/// `persona_month`).
pub fn budget_refusal(
    persona: &troupe_connectors::AgentId,
    budget: &'static str,
    purpose: &'static str,
) {
    metrics::counter!("troupe_budget_refusals_total", "persona" => persona.to_string(),
        "budget" => budget, "purpose" => purpose)
    .increment(1);
}

/// Calls waiting in the model scheduler, per priority.
pub fn scheduler_depth(priority: &'static str, depth: usize) {
    metrics::gauge!("troupe_scheduler_queue_depth", "priority" => priority).set(depth as f64);
}

/// How long a call waited in the model scheduler for its turn, per priority.
pub fn scheduler_wait(priority: &'static str, waited: Duration) {
    metrics::histogram!("troupe_scheduler_wait_seconds", "priority" => priority)
        .record(waited.as_secs_f64());
}

/// The keyword index's catch-up (knowledge/index.rs): changes of the database not yet
/// applied by this replica, and whether a rebuild is under way.
pub fn knowledge_index(lag: i64, rebuilding: bool) {
    metrics::gauge!("troupe_knowledge_index_lag").set(lag as f64);
    metrics::gauge!("troupe_knowledge_index_rebuilding").set(if rebuilding { 1.0 } else { 0.0 });
}

/// A document worker (`troupe extract`) was started: once per worker, not per document,
/// since a worker is kept for the next one (knowledge/sandbox.rs).
pub fn extract_worker_started() {
    metrics::counter!("troupe_extract_workers_started_total").increment(1);
}

/// A 👍 (`up`) or 👎 (`down`) recorded on a persona's reply (issue 32; docs/media.md
/// "Reactions and feedback"): counted when recorded, a change of mind counting again.
pub fn feedback(persona: &troupe_connectors::AgentId, value: &'static str) {
    metrics::counter!("troupe_feedback_total", "persona" => persona.to_string(),
        "value" => value)
    .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the one line of `text` that names all of `labels` in `series`.
    fn value(text: &str, series: &str, labels: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(series) && labels.iter().all(|x| l.contains(x)))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The second call counts on the series the first registered, and a new purpose gets
    /// series of its own.
    #[test]
    fn usage_series_registered_once_keep_counting() {
        let handle = install().expect("the recorder installs");
        let persona = troupe_connectors::AgentId::from("metrics-test-persona");
        model_usage(&persona, "metrics-test-provider", "reply", 10, 3, 2, 7);
        model_usage(&persona, "metrics-test-provider", "reply", 5, 1, 0, 4);
        model_usage(&persona, "metrics-test-provider", "summary", 1, 1, 1, 1);
        let text = handle.render();
        let reply = [
            "persona=\"metrics-test-persona\"",
            "provider=\"metrics-test-provider\"",
            "purpose=\"reply\"",
        ];
        let prompt = [&reply[..], &["kind=\"prompt\""]].concat();
        assert_eq!(value(&text, "troupe_usage_calls_total", &reply), Some(2.0));
        assert_eq!(
            value(&text, "troupe_usage_tokens_total", &prompt),
            Some(15.0)
        );
        assert_eq!(
            value(&text, "troupe_usage_cost_micros_total", &reply),
            Some(11.0)
        );
        let summary = [reply[0], reply[1], "purpose=\"summary\""];
        assert_eq!(
            value(&text, "troupe_usage_calls_total", &summary),
            Some(1.0)
        );
    }
}
