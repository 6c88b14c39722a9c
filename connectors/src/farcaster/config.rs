//! The Farcaster connector's settings: elizaOS's names, read once through the persona's
//! `Lookup` and parsed into typed values. Nothing else in the module reads a setting.
//!
//! Missing credentials mean "not configured" (the persona runs elsewhere); a value that is
//! present but wrong is an error the operator must fix. Secrets never reach a message.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use reqwest::Url;

use crate::connector::{
    ConnectorError, Lookup, http_base_url, invalid_setting, setting, setting_or,
};

pub(crate) const FID: &str = "FARCASTER_FID";
pub(crate) const API_KEY: &str = "FARCASTER_NEYNAR_API_KEY";
pub(crate) const SIGNER_UUID: &str = "FARCASTER_NEYNAR_SIGNER_UUID";
pub(crate) const DRY_RUN: &str = "FARCASTER_DRY_RUN";
pub(crate) const POLL_INTERVAL: &str = "FARCASTER_POLL_INTERVAL";
pub(crate) const API_URL: &str = "NEYNAR_API_URL";
pub(crate) const WEBHOOK_SECRET: &str = "FARCASTER_NEYNAR_WEBHOOK_SECRET";
/// elizaOS 2.x's `polling` or `webhook` (issue 46); unset: webhooks when their secret is set.
pub(crate) const MODE: &str = "FARCASTER_MODE";
pub(crate) const LONG_CASTS: &str = "FARCASTER_LONG_CASTS";
pub(crate) const RATE_LIMIT: &str = "FARCASTER_RATE_LIMIT_PER_MIN";

const DEFAULT_API_URL: &str = "https://api.neynar.com";
const DEFAULT_POLL_SECS: u64 = 120;
const DEFAULT_RATE_LIMIT: u32 = 300;
/// A standard cast: 320 bytes of UTF-8.
pub(crate) const CAST_BYTES: usize = 320;
/// A long cast (Farcaster Pro): 1024 bytes.
pub(crate) const LONG_CAST_BYTES: usize = 1024;

/// A Farcaster account id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Fid(pub u64);

impl fmt::Display for Fid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A credential. Its `Debug` shows nothing of it, so a settings dump cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// How new casts reach the connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Intake {
    /// Poll the notifications of the account at this interval.
    Poll(Duration),
    /// Neynar calls `POST /webhooks/farcaster/{agent}`, signed with this secret.
    Webhook(Secret),
}

/// Everything the connector needs, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub fid: Fid,
    pub api_key: Secret,
    /// Needed to post; may be absent in dry-run mode.
    pub signer_uuid: Option<Secret>,
    pub dry_run: bool,
    pub intake: Intake,
    pub api_url: Url,
    /// The longest cast in bytes.
    pub cast_limit: usize,
    /// Requests per minute to each Neynar endpoint.
    pub rate_limit: NonZeroU32,
}

/// The outcome of reading the settings.
#[derive(Debug)]
pub(crate) enum Parsed {
    Ready(Settings),
    NotConfigured(String),
}

/// `true`/`false` as people write them (`1`, `yes`, `on`, any case).
fn read_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// A switch: off unless set.
fn switch(lookup: Lookup<'_>, name: &str) -> Result<bool, ConnectorError> {
    setting_or(lookup, name, false, "true or false", read_bool)
}

/// A whole number above zero.
fn positive(value: &str) -> Option<u64> {
    value.parse::<u64>().ok().filter(|n| *n > 0)
}

/// Reads the Farcaster settings of one persona.
pub(crate) fn parse(lookup: Lookup<'_>) -> Result<Parsed, ConnectorError> {
    let (fid, api_key) = match (setting(lookup, FID), setting(lookup, API_KEY)) {
        (Some(fid), Some(key)) => (fid, key),
        (fid, key) => return Ok(Parsed::NotConfigured(missing(fid.is_none(), key.is_none()))),
    };
    let fid = positive(&fid)
        .map(Fid)
        .ok_or_else(|| invalid_setting(FID, &fid, "a positive integer (the bot's Farcaster id)"))?;
    let dry_run = switch(lookup, DRY_RUN)?;
    let signer_uuid = setting(lookup, SIGNER_UUID).map(Secret::new);
    if signer_uuid.is_none() && !dry_run {
        return Ok(Parsed::NotConfigured(format!(
            "set {SIGNER_UUID} (a Neynar managed signer for FID {fid}), or {DRY_RUN}=true to run without posting"
        )));
    }
    Ok(Parsed::Ready(Settings {
        fid,
        api_key: Secret::new(api_key),
        signer_uuid,
        dry_run,
        intake: intake(lookup)?,
        api_url: api_url(lookup)?,
        cast_limit: if switch(lookup, LONG_CASTS)? {
            LONG_CAST_BYTES
        } else {
            CAST_BYTES
        },
        rate_limit: setting_or(
            lookup,
            RATE_LIMIT,
            NonZeroU32::new(DEFAULT_RATE_LIMIT).unwrap_or(NonZeroU32::MIN),
            "a positive number of requests per minute",
            |v| v.parse().ok(),
        )?,
    }))
}

/// What to set when the credentials are missing.
fn missing(fid: bool, api_key: bool) -> String {
    let missing: Vec<&str> = [(FID, fid), (API_KEY, api_key)]
        .into_iter()
        .filter_map(|(name, missing)| missing.then_some(name))
        .collect();
    format!("set {} (and {SIGNER_UUID} to post)", missing.join(" and "))
}

/// Webhooks when their secret is set, else polling (its interval is checked either way).
fn intake(lookup: Lookup<'_>) -> Result<Intake, ConnectorError> {
    let poll = setting_or(
        lookup,
        POLL_INTERVAL,
        DEFAULT_POLL_SECS,
        "a whole number of seconds, at least 1",
        positive,
    )?;
    let secret = setting(lookup, WEBHOOK_SECRET);
    let mode = setting(lookup, MODE).map(|m| m.to_ascii_lowercase());
    Ok(match (mode.as_deref(), secret) {
        (Some("polling"), _) | (None, None) => Intake::Poll(Duration::from_secs(poll)),
        (Some("webhook") | None, Some(secret)) => Intake::Webhook(Secret::new(secret)),
        (Some("webhook"), None) => {
            return Err(ConnectorError::Fatal(format!(
                "{MODE} is webhook, but {WEBHOOK_SECRET} is not set: troupe takes only \
                 webhooks signed with it"
            )));
        }
        (Some(other), _) => return Err(invalid_setting(MODE, other, "polling or webhook")),
    })
}

/// Neynar's base URL, or the one `NEYNAR_API_URL` names (a proxy or a fake).
pub(crate) fn api_url(lookup: Lookup<'_>) -> Result<Url, ConnectorError> {
    let raw = setting(lookup, API_URL).unwrap_or_else(|| DEFAULT_API_URL.to_string());
    http_base_url(
        API_URL,
        &raw,
        "an http(s) base URL such as https://api.neynar.com",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::lookup_of;

    fn parse_with(pairs: &[(&str, &str)]) -> Result<Parsed, ConnectorError> {
        parse(&lookup_of(pairs))
    }

    fn ready(pairs: &[(&str, &str)]) -> Settings {
        match parse_with(pairs) {
            Ok(Parsed::Ready(s)) => s,
            other => panic!("expected settings, got {other:?}"),
        }
    }

    const BASE: [(&str, &str); 3] = [
        (FID, "42"),
        (API_KEY, "neynar-key-123"),
        (SIGNER_UUID, "signer-1"),
    ];

    #[test]
    fn defaults_follow_eliza() {
        let s = ready(&BASE);
        assert_eq!(s.fid, Fid(42));
        assert!(!s.dry_run);
        assert_eq!(s.intake, Intake::Poll(Duration::from_secs(120)));
        assert_eq!(s.api_url.as_str(), "https://api.neynar.com/");
        assert_eq!(s.cast_limit, 320);
        assert_eq!(s.rate_limit.get(), 300);
    }

    #[test]
    fn missing_credentials_are_not_an_error() {
        match parse_with(&[]) {
            Ok(Parsed::NotConfigured(why)) => {
                assert!(why.contains(FID) && why.contains(API_KEY), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match parse_with(&[(FID, "42"), (API_KEY, "k")]) {
            Ok(Parsed::NotConfigured(why)) => assert!(why.contains(SIGNER_UUID), "{why}"),
            other => panic!("{other:?}"),
        }
        // Dry run needs no signer.
        let s = ready(&[(FID, "42"), (API_KEY, "k"), (DRY_RUN, "true")]);
        assert!(s.dry_run && s.signer_uuid.is_none());
    }

    #[test]
    fn malformed_values_are_fatal_and_name_the_setting() {
        for (name, value) in [
            (FID, "forty-two"),
            (FID, "0"),
            (DRY_RUN, "maybe"),
            (POLL_INTERVAL, "2m"),
            (POLL_INTERVAL, "0"),
            (API_URL, "ftp://example.com"),
            (API_URL, "not a url"),
            (LONG_CASTS, "sure"),
            (RATE_LIMIT, "0"),
        ] {
            let mut pairs = BASE.to_vec();
            pairs.push((name, value));
            match parse_with(&pairs) {
                Err(ConnectorError::Fatal(m)) => {
                    assert!(m.contains(name), "{m}");
                    assert!(!m.contains("neynar-key-123"), "{m}");
                }
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn options_are_read() {
        let mut pairs = BASE.to_vec();
        pairs.extend([
            (POLL_INTERVAL, "1"),
            (API_URL, "http://127.0.0.1:9999"),
            (LONG_CASTS, "true"),
            (RATE_LIMIT, "60"),
            (DRY_RUN, "FALSE"),
        ]);
        let s = ready(&pairs);
        assert_eq!(s.intake, Intake::Poll(Duration::from_secs(1)));
        assert_eq!(s.api_url.as_str(), "http://127.0.0.1:9999/");
        assert_eq!(s.cast_limit, 1024);
        assert_eq!(s.rate_limit.get(), 60);
        assert!(!s.dry_run);

        pairs.push((WEBHOOK_SECRET, "whsec"));
        assert!(matches!(ready(&pairs).intake, Intake::Webhook(_)));
    }

    /// elizaOS 2.x's `FARCASTER_MODE` (issue 46): `polling` wins over a webhook secret,
    /// `webhook` needs one, another word is refused.
    #[test]
    fn farcaster_mode_picks_the_intake() {
        let mut pairs = BASE.to_vec();
        pairs.extend([(MODE, "POLLING"), (WEBHOOK_SECRET, "whsec")]);
        assert!(matches!(ready(&pairs).intake, Intake::Poll(_)));
        let mode_at = pairs.len() - 2;
        pairs[mode_at] = (MODE, "webhook");
        assert!(matches!(ready(&pairs).intake, Intake::Webhook(_)));
        pairs.pop();
        match parse_with(&pairs) {
            Err(ConnectorError::Fatal(why)) => assert!(why.contains(WEBHOOK_SECRET), "{why}"),
            other => panic!("expected an error, got {other:?}"),
        }
        let mut pairs = BASE.to_vec();
        pairs.push((MODE, "push"));
        assert!(parse_with(&pairs).is_err());
    }

    #[test]
    fn secrets_do_not_show_in_debug() {
        let s = ready(&BASE);
        let dump = format!("{s:?}");
        assert!(
            !dump.contains("neynar-key-123") && !dump.contains("signer-1"),
            "{dump}"
        );
    }
}
