//! Spend and providers: budgets, prices and the model scheduler's account limits
//! (`TROUPE_SPEND_*`, `TROUPE_PROVIDER_RPM|TPM|CONCURRENCY`, troupe.toml's `[prices]`;
//! docs/spend.md), and how model calls ride out a failing provider (retries, backoff, the
//! circuit breaker: `TROUPE_PROVIDER_*`; `provider`).

use anyhow::bail;
use std::time::Duration;

use super::{FileConfig, Layered};

/// Retries, backoff and the circuit breaker of every model provider (see
/// `provider/breaker.rs` and docs/architecture.md, "Faults").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// `TROUPE_PROVIDER_RETRIES`, default 2: further attempts of one call after a failure that
    /// may pass (5xx, timeout, 429, connection refused), while the circuit is closed.
    pub retries: u32,
    /// `TROUPE_PROVIDER_BACKOFF_MS`, default 500: the wait before the first retry; it doubles
    /// for each retry after it, with jitter (half of it random).
    pub backoff: Duration,
    /// `TROUPE_PROVIDER_BACKOFF_MAX_MS`, default 10000: the longest wait between two attempts,
    /// also the cap on a 429's `retry-after`.
    pub backoff_max: Duration,
    /// `TROUPE_PROVIDER_BREAKER_FAILURES`, default 5: failures in a row (across every call to
    /// one provider account) that open its circuit. A call that used up its retries opens it
    /// too.
    pub breaker_failures: u32,
    /// `TROUPE_PROVIDER_BREAKER_COOLDOWN_MS`, default 10000: how long an open circuit stays
    /// open before one call is let through as a probe.
    pub breaker_cooldown: Duration,
    /// `TROUPE_PROVIDER_OUTAGE_WAIT_SECS`, default 900: how long a message waits for its
    /// provider to come back before it is marked failed (and driven again at the next start).
    pub outage_wait: Duration,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            retries: 2,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_millis(10_000),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_millis(10_000),
            outage_wait: Duration::from_secs(900),
        }
    }
}

pub(super) fn provider_settings(
    layered: &Layered<'_>,
    file: &FileConfig,
) -> anyhow::Result<ProviderSettings> {
    let d = ProviderSettings::default();
    let ms = |var: &str, file: Option<u64>, default: Duration| -> anyhow::Result<Duration> {
        Ok(Duration::from_millis(layered.parse(
            var,
            file,
            default.as_millis() as u64,
        )?))
    };
    let settings = ProviderSettings {
        retries: layered.parse("TROUPE_PROVIDER_RETRIES", file.provider_retries, d.retries)?,
        backoff: ms(
            "TROUPE_PROVIDER_BACKOFF_MS",
            file.provider_backoff_ms,
            d.backoff,
        )?,
        backoff_max: ms(
            "TROUPE_PROVIDER_BACKOFF_MAX_MS",
            file.provider_backoff_max_ms,
            d.backoff_max,
        )?,
        breaker_failures: layered
            .parse(
                "TROUPE_PROVIDER_BREAKER_FAILURES",
                file.provider_breaker_failures,
                d.breaker_failures,
            )?
            .max(1),
        breaker_cooldown: ms(
            "TROUPE_PROVIDER_BREAKER_COOLDOWN_MS",
            file.provider_breaker_cooldown_ms,
            d.breaker_cooldown,
        )?,
        outage_wait: Duration::from_secs(layered.parse(
            "TROUPE_PROVIDER_OUTAGE_WAIT_SECS",
            file.provider_outage_wait_secs,
            d.outage_wait.as_secs(),
        )?),
    };
    if settings.backoff > settings.backoff_max {
        bail!(
            "TROUPE_PROVIDER_BACKOFF_MS ({:?}) must not exceed TROUPE_PROVIDER_BACKOFF_MAX_MS ({:?})",
            settings.backoff,
            settings.backoff_max
        );
    }
    Ok(settings)
}

/// `TROUPE_SPEND_*`, `TROUPE_PROVIDER_RPM|TPM|CONCURRENCY` and troupe.toml's `[prices]`
/// (docs/spend.md). `TROUPE_TEST_CLOCK_OFFSET_SECS` is for tests only: it shifts the clock
/// that budgets and rollups use, so a test can be "tomorrow" without waiting.
pub(super) fn spend_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<crate::spend::SpendSettings> {
    use crate::spend::{AccountLimits, Budgets, Limit, SpendSettings};
    let d = SpendSettings::default();
    let limit = |var: &str, file: Option<String>| -> anyhow::Result<Limit> {
        match layered.string(var, file) {
            None => Ok(Limit::default()),
            Some(raw) => raw.parse().map_err(|e| anyhow::anyhow!("{var}: {e}")),
        }
    };
    let budgets = Budgets {
        user_day: limit("TROUPE_SPEND_USER_PER_DAY", file.spend_user_per_day.take())?,
        room_day: limit("TROUPE_SPEND_ROOM_PER_DAY", file.spend_room_per_day.take())?,
        persona_day: limit(
            "TROUPE_SPEND_PERSONA_PER_DAY",
            file.spend_persona_per_day.take(),
        )?,
        persona_month: limit(
            "TROUPE_SPEND_PERSONA_PER_MONTH",
            file.spend_persona_per_month.take(),
        )?,
    };
    let background_share = layered.parse(
        "TROUPE_SPEND_BACKGROUND_SHARE",
        file.spend_background_share,
        d.background_share,
    )?;
    if !(0.0..=1.0).contains(&background_share) {
        bail!("TROUPE_SPEND_BACKGROUND_SHARE={background_share} must be between 0 and 1");
    }
    let prices = match file.prices.take() {
        Some(table) => d
            .prices
            .with(&table)
            .map_err(|e| anyhow::anyhow!("[prices] in troupe.toml: {e}"))?,
        None => d.prices,
    };
    Ok(SpendSettings {
        budgets,
        background_share,
        api_share: spend_api_share(layered, file)?,
        retention_days: layered.parse(
            "TROUPE_SPEND_RETENTION_DAYS",
            file.spend_retention_days,
            d.retention_days,
        )?,
        prices,
        account: AccountLimits {
            concurrency: layered.parse(
                "TROUPE_PROVIDER_CONCURRENCY",
                file.provider_concurrency,
                0,
            )?,
            requests_per_minute: layered.parse("TROUPE_PROVIDER_RPM", file.provider_rpm, 0)?,
            tokens_per_minute: layered.parse("TROUPE_PROVIDER_TPM", file.provider_tpm, 0)?,
        },
        clock_offset_secs: layered.parse("TROUPE_TEST_CLOCK_OFFSET_SECS", None, 0)?,
    })
}

/// `TROUPE_SPEND_API_SHARE`, default 0.5: the share of each persona's budgets that calls
/// for rooms of the HTTP API (`web:`) may use, so the platforms' users keep the rest.
fn spend_api_share(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<f64> {
    let share = layered.parse("TROUPE_SPEND_API_SHARE", file.spend_api_share, 0.5)?;
    if !(0.0..=1.0).contains(&share) {
        bail!("TROUPE_SPEND_API_SHARE={share} must be between 0 and 1");
    }
    Ok(share)
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::config::Config;

    #[test]
    fn provider_settings_default_and_are_checked() {
        let c = Config::for_test();
        assert_eq!(c.provider, ProviderSettings::default());
        let c = Config::from_env(env(&[
            ("TROUPE_PROVIDER_RETRIES", "0"),
            ("TROUPE_PROVIDER_BACKOFF_MS", "20"),
            ("TROUPE_PROVIDER_BREAKER_COOLDOWN_MS", "300"),
            ("TROUPE_PROVIDER_BREAKER_FAILURES", "0"),
        ]))
        .unwrap();
        assert_eq!(c.provider.retries, 0);
        assert_eq!(c.provider.backoff, Duration::from_millis(20));
        assert_eq!(c.provider.breaker_cooldown, Duration::from_millis(300));
        // Zero failures would never let a call through: one is the least.
        assert_eq!(c.provider.breaker_failures, 1);
        let err = Config::from_env(env(&[("TROUPE_PROVIDER_BACKOFF_MS", "20000")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_PROVIDER_BACKOFF_MAX_MS"),
            "{err}"
        );
    }
}
