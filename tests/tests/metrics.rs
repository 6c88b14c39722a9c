//! `GET /metrics` through the real binary: the output parses as the Prometheus text format
//! and its counters follow what happened.

use serde_json::json;
use std::collections::HashMap;
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions};

/// Parses the Prometheus text exposition format: `name{labels} value` per sample, `#` lines
/// for HELP and TYPE. Returns samples keyed by `name{labels}` as written, and fails on any
/// line that is neither.
fn parse(text: &str) -> Result<HashMap<String, f64>, String> {
    let mut samples = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            let kind = words.next();
            if matches!(kind, Some("HELP") | Some("TYPE")) && words.next().is_none() {
                return Err(format!("line {}: {line}", n + 1));
            }
            continue;
        }
        let split = match line.rfind('}') {
            Some(end) => end + 1,
            None => line
                .find(' ')
                .ok_or_else(|| format!("line {}: no value: {line}", n + 1))?,
        };
        let (series, value) = line.split_at(split);
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(format!("line {}: bad metric name: {line}", n + 1));
        }
        let value: f64 = value
            .split_whitespace()
            .next()
            .ok_or_else(|| format!("line {}: no value", n + 1))?
            .parse()
            .map_err(|e| format!("line {}: {e}: {line}", n + 1))?;
        samples.insert(series.to_string(), value);
    }
    Ok(samples)
}

fn sum(samples: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| series.starts_with(&format!("{name}{{")) || series.as_str() == name)
        .filter(|(series, _)| labels.iter().all(|l| series.contains(l)))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test]
async fn metrics_parse_and_count_messages_decisions_and_model_calls() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", "Ada keeps bees.")
            .openai(&fake),
    )
    .await;
    for (n, id) in ["m1", "m2", "m1"].iter().enumerate() {
        let (status, body) = app
            .post_message(
                "ada",
                &json!({"text": format!("question {n}"), "messageId": id}),
            )
            .await;
        assert!(status.is_success(), "{body}");
    }

    let response = app.client().get(app.url("/metrics")).send().await.unwrap();
    assert!(response.status().is_success());
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().await.unwrap();
    let samples = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));

    assert_eq!(
        sum(
            &samples,
            "troupe_messages_in_total",
            &["platform=\"web\"", "result=\"new\""]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &samples,
            "troupe_messages_in_total",
            &["result=\"duplicate\""]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &samples,
            "troupe_decisions_total",
            &["decision=\"responded\""]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &samples,
            "troupe_model_latency_seconds_count",
            &["result=\"ok\""]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(&samples, "troupe_messages_out_total", &["platform=\"web\""]),
        2.0,
        "{text}"
    );
    assert!(
        samples.keys().any(|k| k.starts_with("troupe_bus_depth")),
        "{text}"
    );
}
