//! Accounting: turns one model call into a usage record and its rollups.
//!
//! Tokens come from the provider's usage when it reports them. When it does not (some
//! OpenAI-compatible servers, a stream cut short), they are estimated from the text, one
//! token per four characters (the rule of thumb for English with cl100k-like vocabularies;
//! the record is flagged `estimated`). The cost comes from the persona's price table. The
//! record and the three rollup increments are one transaction (`Store::usage_record`), and
//! the `/metrics` counters are raised per persona, provider and purpose.

use super::{Meter, Purpose, Who, user_key};

/// What one call used: the provider's counts when given, and the text sizes for estimating
/// the ones it did not give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: Option<u32>,
    pub completion: Option<u32>,
    pub cached: Option<u32>,
    pub prompt_chars: usize,
    pub completion_chars: usize,
}

/// One token per this many characters, when the provider reports no usage.
const CHARS_PER_TOKEN: usize = 4;

fn estimate(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

/// Raw records are pruned at most this often.
const PRUNE_EVERY_MS: i64 = 3_600_000;

pub(super) async fn record(
    meter: &Meter,
    who: Who<'_>,
    purpose: Purpose,
    provider: &str,
    tokens: Tokens,
) {
    let (vendor, model) = provider.split_once(':').unwrap_or((provider, ""));
    let estimated = tokens.prompt.is_none() || tokens.completion.is_none();
    let prompt = tokens
        .prompt
        .map_or_else(|| estimate(tokens.prompt_chars), u64::from);
    let completion = tokens
        .completion
        .map_or_else(|| estimate(tokens.completion_chars), u64::from);
    let cached = tokens.cached.map_or(0, u64::from).min(prompt);
    let cost = meter
        .conf
        .prices
        .cost_micros(vendor, model, prompt, cached, completion);
    crate::metrics::model_usage(
        &meter.agent_id,
        vendor,
        purpose.as_str(),
        prompt,
        completion,
        cached,
        cost,
    );
    let inner = &meter.spend.inner;
    let now = inner.clock.now_ms();
    let user = who.user.map(|(p, u)| user_key(p, u));
    let usage = crate::storage::NewUsage {
        agent_id: &meter.agent_id,
        room_key: who.room,
        user_key: user.as_deref(),
        provider: vendor,
        model,
        purpose: purpose.as_str(),
        prompt_tokens: prompt as i64,
        completion_tokens: completion as i64,
        cached_tokens: cached as i64,
        estimated,
        cost_micros: cost,
        day: super::clock::day_of(now),
        at_ms: now,
    };
    if let Err(error) = inner.store.usage_record(&usage).await {
        crate::metrics::error("storage");
        tracing::warn!(%error, purpose = purpose.as_str(), "could not record a model call's usage");
    }
    prune(meter, now);
}

/// Deletes raw records past the retention, in the background, at most hourly per process.
fn prune(meter: &Meter, now: i64) {
    let inner = &meter.spend.inner;
    let last = inner
        .pruned_at_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    if now - last < PRUNE_EVERY_MS
        || inner
            .pruned_at_ms
            .compare_exchange(
                last,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    let store = inner.store.clone();
    let before = now - i64::from(inner.settings.retention_days) * 86_400_000;
    tokio::spawn(async move {
        match store.usage_prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "pruned old usage records"),
            Err(error) => tracing::warn!(%error, "could not prune old usage records"),
        }
    });
}
