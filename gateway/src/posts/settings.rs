//! A persona's schedules as its files and settings give them: Farcaster's elizaOS names
//! (`ENABLE_POST`, `POST_INTERVAL_MIN`/`MAX`, `POST_IMMEDIATELY`, `MAX_CAST_LENGTH`, read
//! like every other setting: `CHARACTER.<ID>.<KEY>`, `secrets`, `settings.secrets`,
//! `settings`, then the environment) and `settings.troupe.posts`. Schedules added through
//! the API are not here: they live in the database only.
//!
//! Decisions (docs/posts.md):
//! - `ENABLE_POST` is **off** unless set. elizaOS turns it on by default, but a troupe
//!   operator who set Farcaster up to answer mentions would not expect the persona to start
//!   casting on its own, at the persona's expense. `troupe check` and the start log say
//!   which personas will post.
//! - `POST_INTERVAL_MIN`/`MAX` are minutes, as elizaOS's Farcaster client reads them (its
//!   defaults: 90 and 180); a value with a unit (`30s`, `2h`) is taken as written, so a
//!   test or an eager operator can go below a minute (2 s at least).
//! - plugin-farcaster 1.x's names `ENABLE_CAST`, `CAST_INTERVAL_MIN`/`MAX` (minutes) and
//!   `CAST_IMMEDIATELY` are read when the `POST_` ones are absent.

use serde_json::Value;

use super::schedule::{Spec, SpecError};
use crate::persona::{Env, Persona};
use crate::storage::ScheduleSource;

/// The schedule id of Farcaster's own posting loop.
pub const FARCASTER_FEED_ID: &str = "farcaster";
/// The longest `settings.troupe.posts` list: a file cannot make a persona post everywhere.
pub const FILE_SCHEDULES_MAX: usize = 20;

/// One schedule a persona's settings ask for.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub id: String,
    pub source: ScheduleSource,
    pub spec: Spec,
}

/// What a persona's settings say about posting, for `troupe check` and the start log.
#[derive(Debug, Clone, Default)]
pub struct PostSettings {
    pub wanted: Vec<Wanted>,
    /// Why a schedule in the settings is not used, one line each.
    pub problems: Vec<String>,
    /// `FARCASTER_DRY_RUN`: Farcaster posts are kept, not sent.
    pub farcaster_dry_run: bool,
}

fn read_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The first of `names` the persona sets.
fn first(persona: &Persona, env: &Env, names: &[&str]) -> Option<(String, String)> {
    names
        .iter()
        .find_map(|n| persona.secret(n, env).map(|v| (n.to_string(), v)))
}

fn switch(persona: &Persona, env: &Env, names: &[&str], problems: &mut Vec<String>) -> bool {
    match first(persona, env, names) {
        None => false,
        Some((name, value)) => read_bool(&value).unwrap_or_else(|| {
            problems.push(format!("{name} is `{value}`; write true or false"));
            false
        }),
    }
}

/// An elizaOS interval: a bare number is minutes; a duration with a unit is as written.
fn interval(value: &str) -> String {
    let v = value.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        format!("{v}m")
    } else {
        v.to_string()
    }
}

/// Farcaster's posting loop, when `ENABLE_POST` is on and the persona is on Farcaster.
fn farcaster(persona: &Persona, env: &Env, out: &mut PostSettings) {
    let on_farcaster = persona.secret("FARCASTER_FID", env).is_some()
        && persona.secret("FARCASTER_NEYNAR_API_KEY", env).is_some();
    out.farcaster_dry_run = switch(persona, env, &["FARCASTER_DRY_RUN"], &mut out.problems);
    if !switch(
        persona,
        env,
        &["ENABLE_POST", "ENABLE_CAST"],
        &mut out.problems,
    ) {
        return;
    }
    if !on_farcaster {
        out.problems.push(
            "ENABLE_POST is on, but Farcaster is not configured (FARCASTER_FID, FARCASTER_NEYNAR_API_KEY)"
                .into(),
        );
        return;
    }
    let min = first(persona, env, &["POST_INTERVAL_MIN", "CAST_INTERVAL_MIN"])
        .map_or_else(|| "90m".to_string(), |(_, v)| interval(&v));
    let max = first(persona, env, &["POST_INTERVAL_MAX", "CAST_INTERVAL_MAX"])
        .map_or_else(|| "180m".to_string(), |(_, v)| interval(&v));
    let max_length = match first(persona, env, &["MAX_CAST_LENGTH"]) {
        None => None,
        Some((_, v)) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                out.problems
                    .push(format!("MAX_CAST_LENGTH is `{v}`; write a positive number"));
                None
            }
        },
    };
    let spec = Spec {
        destination: "farcaster:feed".into(),
        interval_min: Some(min),
        interval_max: Some(max),
        immediately: switch(
            persona,
            env,
            &["POST_IMMEDIATELY", "CAST_IMMEDIATELY"],
            &mut out.problems,
        ),
        max_length,
        ..Spec::default()
    };
    match spec.parse() {
        Ok(_) => out.wanted.push(Wanted {
            id: FARCASTER_FEED_ID.into(),
            source: ScheduleSource::Env,
            spec,
        }),
        Err(SpecError(e)) => out.problems.push(format!("Farcaster posts: {e}")),
    }
}

/// `settings.troupe.posts`: a list of schedules, each checked on its own.
fn file(persona: &Persona, out: &mut PostSettings) {
    let Some(list) = persona.raw.pointer("/settings/troupe/posts") else {
        return;
    };
    let Value::Array(items) = list else {
        out.problems
            .push("settings.troupe.posts must be a list of schedules".into());
        return;
    };
    if items.len() > FILE_SCHEDULES_MAX {
        out.problems.push(format!(
            "settings.troupe.posts has {} schedules; at most {FILE_SCHEDULES_MAX} are read",
            items.len()
        ));
    }
    for (i, item) in items.iter().take(FILE_SCHEDULES_MAX).enumerate() {
        let spec = serde_json::from_value::<Spec>(item.clone())
            .map_err(|e| SpecError(e.to_string()))
            .and_then(|spec| {
                let parsed = spec.parse()?;
                runs_on(persona, &parsed.room).map(|_| spec)
            });
        match spec {
            Ok(spec) => out.wanted.push(Wanted {
                id: format!("file:{i}"),
                source: ScheduleSource::File,
                spec,
            }),
            Err(SpecError(e)) => out
                .problems
                .push(format!("settings.troupe.posts[{i}]: {e}")),
        }
    }
}

/// Whether the persona runs on `room`'s platform: a schedule posts only through the
/// persona's own connectors.
pub fn runs_on(persona: &Persona, room: &troupe_connectors::RoomKey) -> Result<(), SpecError> {
    if persona.platforms().contains(&room.platform) {
        Ok(())
    } else {
        Err(SpecError(format!(
            "room `{room}`: {} does not run on {}; add it to the persona's clients first",
            persona.name, room.platform
        )))
    }
}

/// Everything the persona's settings say about posting.
pub fn of(persona: &Persona, env: &Env) -> PostSettings {
    let mut out = PostSettings::default();
    farcaster(persona, env, &mut out);
    file(persona, &mut out);
    out
}

impl PostSettings {
    /// One line for the start log and `troupe check`: where the persona will post.
    pub fn describe(&self) -> Option<String> {
        if self.wanted.is_empty() {
            return None;
        }
        let rooms: Vec<String> = self
            .wanted
            .iter()
            .map(|w| {
                let dry = w.spec.destination.starts_with("farcaster:") && self.farcaster_dry_run;
                let when = w
                    .spec
                    .every
                    .as_ref()
                    .map(|e| format!("every {e}"))
                    .or_else(|| w.spec.at.as_ref().map(|a| format!("at {a}")))
                    .unwrap_or_else(|| {
                        format!(
                            "every {}-{}",
                            w.spec.interval_min.as_deref().unwrap_or("?"),
                            w.spec.interval_max.as_deref().unwrap_or("?")
                        )
                    });
                format!(
                    "{} {when}{}",
                    w.spec.destination,
                    if dry {
                        " (FARCASTER_DRY_RUN: kept, not sent)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        Some(rooms.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::persona::test_support::env;

    fn persona(mut json: serde_json::Value) -> Persona {
        json["bio"] = serde_json::json!(["Ada keeps the harbour log."]);
        crate::persona::test_support::from_json(json)
    }

    #[test]
    fn enable_post_is_off_unless_set() {
        let p = persona(serde_json::json!({"name": "Ada"}));
        let s = of(
            &p,
            &env(&[("FARCASTER_FID", "1"), ("FARCASTER_NEYNAR_API_KEY", "k")]),
        );
        assert!(s.wanted.is_empty());
        assert!(s.describe().is_none());
    }

    #[test]
    fn farcaster_names_become_a_feed_schedule_in_minutes() {
        let p =
            persona(serde_json::json!({"name": "Ada", "settings": {"POST_INTERVAL_MIN": "2s"}}));
        let s = of(
            &p,
            &env(&[
                ("FARCASTER_FID", "1"),
                ("FARCASTER_NEYNAR_API_KEY", "k"),
                ("ENABLE_POST", "true"),
                ("POST_INTERVAL_MAX", "4s"),
                ("POST_IMMEDIATELY", "yes"),
                ("MAX_CAST_LENGTH", "100"),
            ]),
        );
        assert_eq!(s.wanted.len(), 1, "{:?}", s.problems);
        let spec = &s.wanted[0].spec;
        assert_eq!(spec.destination, "farcaster:feed");
        assert_eq!(spec.interval_min.as_deref(), Some("2s"));
        assert!(spec.immediately);
        assert_eq!(spec.max_length, Some(100));
        assert_eq!(interval("90"), "90m");
        assert!(s.describe().unwrap().contains("farcaster:feed every 2s-4s"));
    }

    #[test]
    fn enable_post_without_farcaster_is_a_problem_not_a_schedule() {
        let p = persona(serde_json::json!({"name": "Ada"}));
        let s = of(&p, &env(&[("ENABLE_POST", "true")]));
        assert!(s.wanted.is_empty());
        assert!(s.problems[0].contains("not configured"), "{:?}", s.problems);
    }

    #[test]
    fn file_schedules_are_read_and_bad_ones_reported() {
        let p = persona(
            serde_json::json!({"name": "Ada", "clients": ["discord", "telegram"],
                "settings": {"troupe": {"posts": [
                {"room": "discord:42", "every": "6h", "jitter": "30m", "prompt": "news"},
                {"room": "telegram:-100", "at": "09:00", "timezone": "Europe/Berlin"},
                {"room": "discord:42", "every": "1s"},
                {"room": "farcaster:feed", "every": "1h"}
            ]}}}),
        );
        let s = of(&p, &Env::default());
        assert_eq!(s.wanted.len(), 2, "{:?}", s.problems);
        assert_eq!(s.wanted[1].id, "file:1");
        assert!(
            s.problems[0].starts_with("settings.troupe.posts[2]"),
            "{:?}",
            s.problems
        );
        assert!(
            s.problems[1].contains("does not run on farcaster"),
            "{:?}",
            s.problems
        );
    }
}
