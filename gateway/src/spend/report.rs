//! Usage reports: the rollups grouped per room, per user or per day since a date (and the
//! raw records per model or purpose), as the
//! API (`GET /api/agents/{agent}/usage`) and the CLI (`troupe usage`) show them.

use serde::Serialize;
use troupe_connectors::AgentId;

use super::clock;
use crate::storage::{StorageError, Store, UsageBy, UsageRow};

/// The default window: the last 30 days, today included.
pub const DEFAULT_DAYS: i64 = 30;

/// `by=room|user|day`, parsed.
pub fn parse_by(text: &str) -> Result<UsageBy, String> {
    match text {
        "room" => Ok(UsageBy::Room),
        "user" => Ok(UsageBy::User),
        "day" => Ok(UsageBy::Day),
        "model" => Ok(UsageBy::Model),
        "purpose" => Ok(UsageBy::Purpose),
        other => Err(format!(
            "`by` must be room, user, day, model or purpose, not `{other}`"
        )),
    }
}

/// `since=YYYY-MM-DD`, parsed into a day number; `None` is [`DEFAULT_DAYS`] ago.
pub fn parse_since(text: Option<&str>, today: i64) -> Result<i64, String> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(today - (DEFAULT_DAYS - 1)),
        Some(t) => clock::parse_date(t)
            .ok_or_else(|| format!("`since` must be a date such as 2026-12-01, not `{t}`")),
    }
}

/// One group of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportRow {
    /// The room key, the `platform:user`, or the date (`YYYY-MM-DD`).
    pub key: String,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    /// Prompt plus completion.
    pub tokens: i64,
    pub cost_micros: i64,
    pub cost_usd: f64,
}

/// A report: its rows and their sum.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub agent_id: AgentId,
    pub by: &'static str,
    pub since: String,
    pub rows: Vec<ReportRow>,
    pub total: ReportRow,
}

fn row(key: String, r: &UsageRow) -> ReportRow {
    ReportRow {
        key,
        calls: r.calls,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        cached_tokens: r.cached_tokens,
        tokens: r.prompt_tokens + r.completion_tokens,
        cost_micros: r.cost_micros,
        cost_usd: r.cost_micros as f64 / 1e6,
    }
}

pub async fn report(
    store: &Store,
    agent_id: &AgentId,
    by: UsageBy,
    since: i64,
) -> Result<Report, StorageError> {
    let rows = store.usage_rollup(agent_id, by, since).await?;
    let rows: Vec<ReportRow> = rows
        .iter()
        .map(|r| match by {
            UsageBy::Day => row(clock::date_of(r.day), r),
            _ => row(r.key.clone(), r),
        })
        .collect();
    let mut total = ReportRow {
        key: "total".into(),
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        tokens: 0,
        cost_micros: 0,
        cost_usd: 0.0,
    };
    for r in &rows {
        total.calls += r.calls;
        total.prompt_tokens += r.prompt_tokens;
        total.completion_tokens += r.completion_tokens;
        total.cached_tokens += r.cached_tokens;
        total.tokens += r.tokens;
        total.cost_micros += r.cost_micros;
    }
    total.cost_usd = total.cost_micros as f64 / 1e6;
    Ok(Report {
        agent_id: agent_id.clone(),
        by: match by {
            UsageBy::Room => "room",
            UsageBy::User => "user",
            UsageBy::Day => "day",
            UsageBy::Model => "model",
            UsageBy::Purpose => "purpose",
        },
        since: clock::date_of(since),
        rows,
        total,
    })
}

/// The report as a text table, for `troupe usage`.
pub fn table(report: &Report) -> String {
    let width = report
        .rows
        .iter()
        .map(|r| r.key.chars().count())
        .max()
        .unwrap_or(0)
        .max(report.by.len())
        .max(5);
    let mut out = format!(
        "usage of {} by {} since {}\n{:<width$}  {:>8}  {:>12}  {:>12}  {:>10}  {:>12}\n",
        report.agent_id,
        report.by,
        report.since,
        report.by,
        "calls",
        "prompt",
        "completion",
        "cached",
        "cost (USD)"
    );
    for r in report.rows.iter().chain(std::iter::once(&report.total)) {
        out.push_str(&format!(
            "{:<width$}  {:>8}  {:>12}  {:>12}  {:>10}  {:>12.6}\n",
            r.key, r.calls, r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.cost_usd
        ));
    }
    out
}
