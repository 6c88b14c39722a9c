//! The Farcaster connector's settings: elizaOS's names, read once through the persona's
//! `Lookup` and parsed into typed values. Nothing else in the module reads a setting.
//!
//! Missing credentials mean "not configured" (the persona runs elsewhere); a value that is
//! present but wrong is an error the operator must fix. Secrets never reach a message.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use reqwest::Url;

use crate::connector::ConnectorError;
use crate::connector::Lookup;

pub(crate) const FID: &str = "FARCASTER_FID";
pub(crate) const API_KEY: &str = "FARCASTER_NEYNAR_API_KEY";
pub(crate) const SIGNER_UUID: &str = "FARCASTER_NEYNAR_SIGNER_UUID";
pub(crate) const DRY_RUN: &str = "FARCASTER_DRY_RUN";
pub(crate) const POLL_INTERVAL: &str = "FARCASTER_POLL_INTERVAL";
pub(crate) const API_URL: &str = "NEYNAR_API_URL";
pub(crate) const WEBHOOK_SECRET: &str = "FARCASTER_NEYNAR_WEBHOOK_SECRET";
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

fn get(lookup: Lookup<'_>, name: &str) -> Option<String> {
    lookup(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn fatal(name: &str, value: &str, expected: &str) -> ConnectorError {
    ConnectorError::Fatal(format!(
        "{name}=`{value}` is not valid: expected {expected}"
    ))
}

fn parse_bool(name: &str, value: Option<String>) -> Result<bool, ConnectorError> {
    let Some(value) = value else {
        return Ok(false);
    };
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(fatal(name, &value, "true or false")),
    }
}

/// Reads the Farcaster settings of one persona.
pub(crate) fn parse(lookup: Lookup<'_>) -> Result<Parsed, ConnectorError> {
    let fid = get(lookup, FID);
    let api_key = get(lookup, API_KEY);
    let (fid, api_key) = match (fid, api_key) {
        (Some(fid), Some(key)) => (fid, key),
        (fid, key) => {
            let missing: Vec<&str> = [(FID, fid.is_none()), (API_KEY, key.is_none())]
                .into_iter()
                .filter_map(|(name, missing)| missing.then_some(name))
                .collect();
            return Ok(Parsed::NotConfigured(format!(
                "set {} (and {SIGNER_UUID} to post)",
                missing.join(" and ")
            )));
        }
    };
    let fid = match fid.parse::<u64>() {
        Ok(n) if n > 0 => Fid(n),
        _ => {
            return Err(fatal(
                FID,
                &fid,
                "a positive integer (the bot's Farcaster id)",
            ));
        }
    };
    let dry_run = parse_bool(DRY_RUN, get(lookup, DRY_RUN))?;
    let signer_uuid = get(lookup, SIGNER_UUID).map(Secret::new);
    if signer_uuid.is_none() && !dry_run {
        return Ok(Parsed::NotConfigured(format!(
            "set {SIGNER_UUID} (a Neynar managed signer for FID {fid}), or {DRY_RUN}=true to run without posting"
        )));
    }
    let poll = match get(lookup, POLL_INTERVAL) {
        None => Duration::from_secs(DEFAULT_POLL_SECS),
        Some(v) => match v.parse::<u64>() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => {
                return Err(fatal(
                    POLL_INTERVAL,
                    &v,
                    "a whole number of seconds, at least 1",
                ));
            }
        },
    };
    let intake = match get(lookup, WEBHOOK_SECRET) {
        Some(secret) => Intake::Webhook(Secret::new(secret)),
        None => Intake::Poll(poll),
    };
    let api_url = {
        let raw = get(lookup, API_URL).unwrap_or_else(|| DEFAULT_API_URL.to_string());
        match Url::parse(&raw) {
            Ok(url)
                if matches!(url.scheme(), "http" | "https")
                    && url.host().is_some()
                    && url.query().is_none() =>
            {
                url
            }
            _ => {
                return Err(fatal(
                    API_URL,
                    &raw,
                    "an http(s) base URL such as https://api.neynar.com",
                ));
            }
        }
    };
    let cast_limit = if parse_bool(LONG_CASTS, get(lookup, LONG_CASTS))? {
        LONG_CAST_BYTES
    } else {
        CAST_BYTES
    };
    let rate_limit = match get(lookup, RATE_LIMIT) {
        None => NonZeroU32::new(DEFAULT_RATE_LIMIT).unwrap_or(NonZeroU32::MIN),
        Some(v) => match v.parse::<NonZeroU32>() {
            Ok(n) => n,
            Err(_) => {
                return Err(fatal(
                    RATE_LIMIT,
                    &v,
                    "a positive number of requests per minute",
                ));
            }
        },
    };
    Ok(Parsed::Ready(Settings {
        fid,
        api_key: Secret::new(api_key),
        signer_uuid,
        dry_run,
        intake,
        api_url,
        cast_limit,
        rate_limit,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse_with(pairs: &[(&str, &str)]) -> Result<Parsed, ConnectorError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| map.get(k).cloned();
        parse(&lookup)
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
