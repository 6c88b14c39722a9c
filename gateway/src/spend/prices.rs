//! Prices: what a model call cost, from its tokens.
//!
//! Prices are US dollars per million tokens (the unit the vendors publish), for prompt
//! tokens, cached prompt tokens and completion tokens. Costs are kept in micro-dollars
//! (integers), so sums in the database are exact. The default table holds list prices of
//! common models at the time of writing; `troupe.toml`'s `[prices]` and the persona's
//! `settings.spend.prices` override it, entry by entry (docs/spend.md). A model is found by
//! its exact name, else by the longest entry its name starts with (`gpt-4o-mini-2024-07-18`
//! is `gpt-4o-mini`); a model in no table, or any Ollama model, costs nothing.

use serde::Deserialize;
use std::collections::BTreeMap;

/// One model's price, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Price {
    pub input: f64,
    /// Cached prompt tokens; the input price when absent.
    #[serde(default, alias = "cached_input")]
    pub cached_input: Option<f64>,
    #[serde(default)]
    pub output: f64,
}

impl Price {
    const fn new(input: f64, cached_input: f64, output: f64) -> Price {
        Price {
            input,
            cached_input: Some(cached_input),
            output,
        }
    }

    /// The cost of one call in micro-dollars. `prompt` includes the `cached` tokens.
    pub fn cost_micros(&self, prompt: u64, cached: u64, completion: u64) -> i64 {
        let cached = cached.min(prompt);
        let micros = (prompt - cached) as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + completion as f64 * self.output;
        micros.round().clamp(0.0, i64::MAX as f64) as i64
    }

    fn valid(&self) -> bool {
        let ok = |p: f64| p.is_finite() && p >= 0.0;
        ok(self.input) && ok(self.output) && self.cached_input.is_none_or(ok)
    }
}

/// The default table: list prices (USD per million tokens) as published by the vendors in
/// 2025. Check them against your contract and override what differs.
const DEFAULTS: &[(&str, Price)] = &[
    ("gpt-4o-mini", Price::new(0.15, 0.075, 0.60)),
    ("gpt-4o", Price::new(2.50, 1.25, 10.00)),
    ("gpt-4.1", Price::new(2.00, 0.50, 8.00)),
    ("gpt-4.1-mini", Price::new(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", Price::new(0.10, 0.025, 0.40)),
    ("gpt-5", Price::new(1.25, 0.125, 10.00)),
    ("gpt-5-mini", Price::new(0.25, 0.025, 2.00)),
    ("gpt-5-nano", Price::new(0.05, 0.005, 0.40)),
    ("o3-mini", Price::new(1.10, 0.55, 4.40)),
    ("o4-mini", Price::new(1.10, 0.275, 4.40)),
    ("claude-3-5-haiku", Price::new(0.80, 0.08, 4.00)),
    ("claude-haiku-4-5", Price::new(1.00, 0.10, 5.00)),
    ("claude-3-5-sonnet", Price::new(3.00, 0.30, 15.00)),
    ("claude-3-7-sonnet", Price::new(3.00, 0.30, 15.00)),
    ("claude-sonnet-4", Price::new(3.00, 0.30, 15.00)),
    ("claude-opus-4", Price::new(15.00, 1.50, 75.00)),
    ("text-embedding-3-small", Price::new(0.02, 0.02, 0.0)),
    ("text-embedding-3-large", Price::new(0.13, 0.13, 0.0)),
    ("text-embedding-ada-002", Price::new(0.10, 0.10, 0.0)),
    // Transcription: an audio second is `AUDIO_TOKENS_PER_SECOND` (10) prompt tokens, so
    // $10 per million is $0.006 a minute; the gpt-4o ones report their own tokens.
    ("whisper-1", Price::new(10.0, 10.0, 0.0)),
    ("gpt-4o-transcribe", Price::new(6.0, 6.0, 10.0)),
    ("gpt-4o-mini-transcribe", Price::new(3.0, 3.0, 5.0)),
];

/// A price table: the defaults with overrides on top.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    entries: BTreeMap<String, Price>,
}

impl Prices {
    /// The default table.
    pub fn defaults() -> Prices {
        Prices {
            entries: DEFAULTS
                .iter()
                .map(|(name, price)| (name.to_string(), *price))
                .collect(),
        }
    }

    /// This table with `overrides` on top (entry by entry). A negative or non-finite price
    /// is an error naming the model.
    pub fn with(&self, overrides: &BTreeMap<String, Price>) -> Result<Prices, String> {
        let mut out = self.clone();
        for (model, price) in overrides {
            if !price.valid() {
                return Err(format!(
                    "the price of `{model}` must be zero or more dollars per million tokens"
                ));
            }
            out.entries.insert(model.trim().to_string(), *price);
        }
        Ok(out)
    }

    /// The price of `model` (exact name, else the longest entry it starts with).
    pub fn get(&self, provider: &str, model: &str) -> Option<Price> {
        if let Some(p) = self.entries.get(model) {
            return Some(*p);
        }
        let longest = self
            .entries
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p);
        // Local models cost nothing unless the operator says otherwise.
        longest.or_else(|| (provider == "ollama").then_some(Price::new(0.0, 0.0, 0.0)))
    }

    /// The cost in micro-dollars; 0 for a model in no table.
    pub fn cost_micros(
        &self,
        provider: &str,
        model: &str,
        prompt: u64,
        cached: u64,
        completion: u64,
    ) -> i64 {
        self.get(provider, model)
            .map_or(0, |p| p.cost_micros(prompt, cached, completion))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_overrides_replace_entries() {
        let prices = Prices::defaults();
        assert_eq!(
            prices.get("openai", "gpt-4o-mini-2024-07-18"),
            prices.get("openai", "gpt-4o-mini")
        );
        assert_ne!(
            prices.get("openai", "gpt-4o-2024-08-06"),
            prices.get("openai", "gpt-4o-mini")
        );
        // 1M prompt tokens of gpt-4o-mini at $0.15 = 150_000 micro-dollars.
        assert_eq!(
            prices.cost_micros("openai", "gpt-4o-mini", 1_000_000, 0, 0),
            150_000
        );
        // Cached tokens are billed at the cached price.
        assert_eq!(
            prices.cost_micros("openai", "gpt-4o-mini", 1_000_000, 1_000_000, 0),
            75_000
        );
        assert_eq!(prices.cost_micros("openai", "my-own-model", 10, 0, 10), 0);
        let mut ours = BTreeMap::new();
        ours.insert(
            "my-own-model".to_string(),
            Price {
                input: 1.0,
                cached_input: None,
                output: 2.0,
            },
        );
        let prices = prices.with(&ours).unwrap();
        assert_eq!(prices.cost_micros("openai", "my-own-model", 10, 4, 10), 30);
        ours.get_mut("my-own-model").unwrap().input = -1.0;
        assert!(prices.with(&ours).unwrap_err().contains("my-own-model"));
    }
}
