//! What a schedule is, parsed once: where it posts (`room`), when (`Cadence`), and what it
//! asks for (`prompt`). Three writers make one: Farcaster's elizaOS settings (`ENABLE_POST`,
//! `POST_INTERVAL_MIN`/`MAX` in seconds, as plugin-farcaster reads them), a character's
//! `settings.troupe.posts` entries, and `POST /api/agents/{agent}/posts`. All three become
//! the same [`Spec`] JSON, which the database keeps and every replica parses back.
//!
//! The only computation here is `next_after`: the next run after a moment. It never looks
//! back, which is what makes a gateway that was down fire at most one catch-up run: the
//! claim of the one overdue run stores the next run after *now*, not after the missed one.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use troupe_connectors::{Platform, RoomKey};

/// The shortest `every` (and Farcaster interval): 10 s, short enough for tests, long enough
/// that a typo (`"1"` read as seconds) cannot make a persona post every second.
pub const MIN_EVERY: Duration = Duration::from_secs(10);
/// Farcaster's interval may go down to 2 s for tests that watch several casts arrive; an
/// operator gets elizaOS's minutes (the defaults below).
pub const MIN_FARCASTER_INTERVAL: Duration = Duration::from_secs(2);
/// The longest a prompt given by a file or the API may be.
pub const PROMPT_MAX_CHARS: usize = 2_000;

/// A schedule as stored and as the API and files give it (camelCase JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// `room` in JSON: `platform:id`, `discord:<channel>`, `telegram:<chat>`,
    /// `farcaster:feed`, `farcaster:channel:<name>`; parsed into a `RoomKey` by `parse`.
    #[serde(rename = "room")]
    pub destination: String,
    /// `10s`, `30m`, `6h`, `1d`, `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// A random delay of up to this much added to each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// `HH:MM` each day, in `timezone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// An IANA zone (`Europe/Berlin`); UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// What to post about; the persona's post template when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Farcaster's `POST_INTERVAL_MIN`/`MAX`, as durations (`90m`; elizaOS's bare numbers
    /// are minutes, turned into this form where its settings are read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_max: Option<String>,
    /// Farcaster's `POST_IMMEDIATELY`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub immediately: bool,
    /// The longest post in characters (Farcaster's `MAX_CAST_LENGTH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Keep each post as a draft until an operator approves it (issue 47).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approve: bool,
    /// How long a draft waits for its approval before it expires (`24h` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
}

/// How long a draft waits for approval when the schedule does not say.
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(86_400);
/// The longest a draft may wait: a week.
pub const MAX_EXPIRE_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// When a schedule runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Cadence {
    /// Every `every`, plus up to `jitter`.
    Every { every: Duration, jitter: Duration },
    /// A random time between `min` and `max` after the last run (Farcaster's interval).
    Between { min: Duration, max: Duration },
    /// Each day at `time` in `zone`, plus up to `jitter`.
    Daily {
        time: jiff::civil::Time,
        zone: jiff::tz::TimeZone,
        jitter: Duration,
    },
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub room: RoomKey,
    pub cadence: Cadence,
    pub prompt: Option<String>,
    pub immediately: bool,
    pub max_length: Option<usize>,
    /// `approve: true`: how long each draft waits for its approval; `None` posts at once.
    pub approval: Option<Duration>,
}

/// Why a schedule was refused, said to the author or the API caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(message.into()))
}

/// `10s`, `30m`, `6h`, `1d`, `1h30m`: whole numbers with a unit each.
pub fn parse_duration(text: &str) -> Result<Duration, SpecError> {
    let text = text.trim();
    if text.is_empty() {
        return err("an empty duration; write e.g. 10s, 30m, 6h or 1d");
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => {
                return err(format!(
                    "`{text}` is not a duration; write e.g. 10s, 30m, 6h, 1d or 1h30m"
                ));
            }
        };
        let n: u64 = number
            .parse()
            .map_err(|_| SpecError(format!("`{text}`: a unit without a number")))?;
        number.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .filter(|v| *v <= 366 * 86_400)
            .ok_or_else(|| SpecError(format!("`{text}` is longer than a year")))?;
    }
    if !number.is_empty() {
        return err(format!(
            "`{text}` lacks a unit; write e.g. {number}s or {number}m"
        ));
    }
    Ok(Duration::from_secs(total))
}

/// The room a schedule posts to: a platform troupe posts on, and an id.
fn parse_room(text: &str) -> Result<RoomKey, SpecError> {
    let Some((platform, id)) = text.split_once(':') else {
        return err(format!(
            "room `{text}` must be platform:id (discord:<channel id>, telegram:<chat id>, farcaster:feed, farcaster:channel:<name>)"
        ));
    };
    let platform: Platform = platform
        .parse()
        .map_err(|_| SpecError(format!("room `{text}`: unknown platform `{platform}`")))?;
    let id_ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'));
    if !id_ok {
        return err(format!(
            "room `{text}`: the id must be 1-128 characters of letters, digits, - _ : ."
        ));
    }
    match platform {
        Platform::Web => err("room: the web platform has no room to post to"),
        Platform::Farcaster if id != "feed" && !id.starts_with("channel:") => err(format!(
            "room `{text}`: on Farcaster post to farcaster:feed or farcaster:channel:<name>"
        )),
        _ => Ok(RoomKey::new(platform, troupe_connectors::RoomId::new(id))),
    }
}

fn parse_at(
    at: &str,
    timezone: Option<&str>,
) -> Result<(jiff::civil::Time, jiff::tz::TimeZone), SpecError> {
    let time: jiff::civil::Time = at
        .trim()
        .parse()
        .map_err(|_| SpecError(format!("at `{at}` is not a time of day; write HH:MM")))?;
    let zone = match timezone {
        None => jiff::tz::TimeZone::UTC,
        Some(name) => jiff::tz::TimeZone::get(name).map_err(|_| {
            SpecError(format!(
                "timezone `{name}` is not a known IANA zone (e.g. Europe/Berlin, UTC)"
            ))
        })?,
    };
    Ok((time, zone))
}

impl Spec {
    /// Parses and checks the whole schedule.
    pub fn parse(&self) -> Result<Schedule, SpecError> {
        let room = parse_room(&self.destination)?;
        let jitter = self.jitter.as_deref().map(parse_duration).transpose()?;
        let cadence = match (&self.every, &self.at, &self.interval_min) {
            (Some(every), None, None) => {
                let every = parse_duration(every)?;
                if every < MIN_EVERY {
                    return err(format!("every must be at least {}s", MIN_EVERY.as_secs()));
                }
                Cadence::Every {
                    every,
                    jitter: jitter.unwrap_or_default(),
                }
            }
            (None, Some(at), None) => {
                let (time, zone) = parse_at(at, self.timezone.as_deref())?;
                Cadence::Daily {
                    time,
                    zone,
                    jitter: jitter.unwrap_or_default(),
                }
            }
            (None, None, Some(min)) => {
                let min = parse_duration(min)?;
                let max = match &self.interval_max {
                    Some(max) => parse_duration(max)?.max(min),
                    None => min,
                };
                if min < MIN_FARCASTER_INTERVAL {
                    return err("POST_INTERVAL_MIN must be at least 2 seconds");
                }
                Cadence::Between { min, max }
            }
            (None, None, None) => return err("a schedule needs `every` or `at`"),
            _ => return err("a schedule takes `every` or `at`, not both"),
        };
        if self.timezone.is_some() && self.at.is_none() {
            return err("timezone goes with `at`");
        }
        if let Some(prompt) = &self.prompt
            && prompt.chars().count() > PROMPT_MAX_CHARS
        {
            return err(format!(
                "prompt is longer than {PROMPT_MAX_CHARS} characters"
            ));
        }
        let approval = self.approval()?;
        Ok(Schedule {
            room,
            cadence,
            approval,
            prompt: self.prompt.clone().filter(|p| !p.trim().is_empty()),
            immediately: self.immediately,
            max_length: self.max_length.filter(|n| *n > 0),
        })
    }
}

impl Spec {
    /// `approve` and `expireAfter`: 1 s to a week, 24 h when absent.
    fn approval(&self) -> Result<Option<Duration>, SpecError> {
        let within = match &self.expire_after {
            None => DEFAULT_EXPIRE_AFTER,
            Some(text) => parse_duration(text)?,
        };
        if within.is_zero() || within > MAX_EXPIRE_AFTER {
            return err("expireAfter must be between 1s and 7d");
        }
        if self.expire_after.is_some() && !self.approve {
            return err("expireAfter goes with `approve: true`");
        }
        Ok(self.approve.then_some(within))
    }
}

fn random_upto(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_millis(rand::rng().random_range(0..=max.as_millis() as u64))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Schedule {
    /// The first run of a schedule made at `now_ms`: now with `immediately`, else one
    /// cadence from now.
    pub fn first_run(&self, now_ms: i64) -> i64 {
        if self.immediately {
            now_ms
        } else {
            self.next_after(now_ms)
        }
    }

    /// The next run strictly after `now_ms`.
    pub fn next_after(&self, now_ms: i64) -> i64 {
        match &self.cadence {
            Cadence::Every { every, jitter } => now_ms
                .saturating_add(ms(*every))
                .saturating_add(ms(random_upto(*jitter))),
            Cadence::Between { min, max } => {
                let spread = max.saturating_sub(*min);
                now_ms
                    .saturating_add(ms(*min))
                    .saturating_add(ms(random_upto(spread)))
            }
            Cadence::Daily { time, zone, jitter } => {
                daily_after(now_ms, *time, zone).saturating_add(ms(random_upto(*jitter)))
            }
        }
    }

    /// The shortest gap between two runs: a restart with `immediately` posts at once only
    /// when the last post is at least this old.
    pub fn min_gap_ms(&self) -> i64 {
        match &self.cadence {
            Cadence::Every { every, .. } => ms(*every),
            Cadence::Between { min, .. } => ms(*min),
            Cadence::Daily { .. } => 86_400_000,
        }
    }
}

/// The first `time` of day in `zone` strictly after `now_ms`.
fn daily_after(now_ms: i64, time: jiff::civil::Time, zone: &jiff::tz::TimeZone) -> i64 {
    let fallback = now_ms.saturating_add(86_400_000);
    let Ok(now) = jiff::Timestamp::from_millisecond(now_ms) else {
        return fallback;
    };
    let today = now.to_zoned(zone.clone()).date();
    for days in 0..3 {
        let Ok(date) = today.checked_add(jiff::Span::new().days(days)) else {
            continue;
        };
        // A time skipped by a DST change resolves forward (jiff's compatible rule).
        if let Ok(at) = date.to_datetime(time).to_zoned(zone.clone()) {
            let at_ms = at.timestamp().as_millisecond();
            if at_ms > now_ms {
                return at_ms;
            }
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Result<Schedule, SpecError> {
        serde_json::from_value::<Spec>(json).unwrap().parse()
    }

    #[test]
    fn durations_parse_with_units_and_refuse_the_rest() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("10").unwrap_err().0.contains("lacks a unit"));
        assert!(parse_duration("ten minutes").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("400d").unwrap_err().0.contains("year"));
    }

    #[test]
    fn every_is_at_least_ten_seconds() {
        let s = spec(serde_json::json!({"room": "discord:123", "every": "10s"})).unwrap();
        assert_eq!(s.next_after(1_000), 11_000);
        let e = spec(serde_json::json!({"room": "discord:123", "every": "9s"})).unwrap_err();
        assert!(e.0.contains("at least 10s"), "{e}");
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        let s = spec(serde_json::json!({"room": "telegram:-100", "every": "10s", "jitter": "5s"}))
            .unwrap();
        for _ in 0..50 {
            let next = s.next_after(0);
            assert!((10_000..=15_000).contains(&next), "{next}");
        }
    }

    #[test]
    fn every_or_at_not_both_and_not_neither() {
        let both = serde_json::json!({"room": "discord:1", "every": "1h", "at": "09:00"});
        assert!(spec(both).unwrap_err().0.contains("not both"));
        assert!(
            spec(serde_json::json!({"room": "discord:1"}))
                .unwrap_err()
                .0
                .contains("needs")
        );
        let tz_alone = serde_json::json!({"room": "discord:1", "every": "1h", "timezone": "UTC"});
        assert!(spec(tz_alone).is_err());
    }

    #[test]
    fn rooms_are_checked() {
        for bad in [
            "discord",
            "web:x",
            "myspace:1",
            "farcaster:0xabc",
            "discord:a b",
            "discord:",
        ] {
            let r = spec(serde_json::json!({"room": bad, "every": "1h"}));
            assert!(r.is_err(), "{bad}");
        }
        for good in [
            "farcaster:feed",
            "farcaster:channel:memes",
            "telegram:-100123",
            "discord:42",
        ] {
            assert!(
                spec(serde_json::json!({"room": good, "every": "1h"})).is_ok(),
                "{good}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r =
            serde_json::from_value::<Spec>(serde_json::json!({"room": "discord:1", "evry": "1h"}));
        assert!(r.is_err());
    }

    #[test]
    fn at_runs_daily_in_its_zone() {
        let s = spec(
            serde_json::json!({"room": "discord:1", "at": "09:00", "timezone": "Europe/Berlin"}),
        )
        .unwrap();
        // 2026-01-15 07:00 UTC = 08:00 Berlin (CET): the run is 08:00 UTC the same day.
        let now = jiff::Timestamp::from_second(1_768_460_400)
            .unwrap()
            .as_millisecond();
        let next = s.next_after(now);
        let at = jiff::Timestamp::from_millisecond(next).unwrap();
        assert_eq!(at.to_string(), "2026-01-15T08:00:00Z");
        // After it passed: the next day.
        let after = s.next_after(next);
        assert_eq!(after - next, 86_400_000);
        let bad = serde_json::json!({"room": "discord:1", "at": "09:00", "timezone": "Mars/Base"});
        assert!(spec(bad).unwrap_err().0.contains("IANA"));
        assert!(spec(serde_json::json!({"room": "discord:1", "at": "25:00"})).is_err());
    }

    #[test]
    fn farcaster_intervals_pick_within_min_and_max() {
        let s = Spec {
            destination: "farcaster:feed".into(),
            interval_min: Some("2s".into()),
            interval_max: Some("4s".into()),
            immediately: true,
            ..Spec::default()
        }
        .parse()
        .unwrap();
        assert_eq!(s.first_run(5), 5, "POST_IMMEDIATELY runs at once");
        for _ in 0..50 {
            let n = s.next_after(0);
            assert!((2_000..=4_000).contains(&n), "{n}");
        }
        let fast = Spec {
            destination: "farcaster:feed".into(),
            interval_min: Some("1s".into()),
            ..Spec::default()
        };
        assert!(fast.parse().is_err());
    }
}
