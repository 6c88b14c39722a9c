//! How agents work: history, the prompt's budget, model calls, the in-process bus's
//! capacity, retries of a message, bot-to-bot turns, and memory (`TROUPE_MEMORY_*`).

use std::time::Duration;

use super::{FileConfig, Layered};

/// `TROUPE_TURNS_IN_FLIGHT`'s default: turns of one persona the in-process bus runs at once
/// (`bus::in_process`). Here, with the other settings, so that the bus imports no config.
///
/// Why 256: enough that the cap never is the bottleneck, small enough that the memory is.
/// A turn spends its time waiting on the database or the model, and both are capped below
/// this already: SQLite has one writer (the engine batches whatever is queued when it
/// wakes, and 256 callers fill a batch), Postgres has 32 connections per process, and a
/// persona makes `TROUPE_MODEL_CONCURRENCY` (16) model calls at once; 256 leaves a deep
/// queue in front of each. At the other end, 256 turns of the largest prompt
/// (`TROUPE_PROMPT_BUDGET_CHARS`, 24,000 characters, held by the prompt and the why panel)
/// stay around 25 MiB, however many rooms wait. Measured in docs/benchmarks.md.
pub const DEFAULT_TURNS_IN_FLIGHT: usize = 256;

/// How agents work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// `TROUPE_HISTORY_LIMIT`, default 32 (as elizaOS): room messages recalled per prompt.
    pub history_limit: u32,
    /// `TROUPE_PROMPT_BUDGET_CHARS`, default 24000: the prompt's size budget in characters.
    pub prompt_budget_chars: usize,
    /// `TROUPE_MODEL_TIMEOUT_SECS`, default 60: one model call's deadline.
    pub model_timeout: Duration,
    /// `TROUPE_MODEL_CONCURRENCY`, default 16: model calls in flight per provider.
    pub model_concurrency: usize,
    /// `TROUPE_BUS_CAPACITY`, default 10000: messages queued in the in-process bus before
    /// connectors are slowed down.
    pub bus_capacity: usize,
    /// `TROUPE_TURNS_IN_FLIGHT`, default 256: messages of one persona the in-process bus
    /// hands over at once; the others wait in their room's queue (see `bus::in_process`).
    pub turns_in_flight: usize,
    /// `TROUPE_MAX_ATTEMPTS`, default 5: how often a message is tried, its first try
    /// included. A try is counted before it starts, so one that crashes the process counts;
    /// a message out of tries is given up (see `storage::journal`).
    pub max_attempts: u32,
    /// `TROUPE_BOT_TURNS`, default 3: bot messages in a row in a room, without a human,
    /// after which the persona stays silent until a human speaks (docs/rooms.md).
    pub bot_turns: u32,
    /// Room summaries and user facts (see docs/memory.md).
    pub memory: MemorySettings,
    /// Images in messages (`TROUPE_VISION`, `TROUPE_MEDIA_MAX_BYTES`; docs/media.md).
    pub media: MediaSettings,
    /// Live replies and edits (`TROUPE_STREAM`, `TROUPE_STREAM_EDIT_MS`,
    /// `TROUPE_EDIT_WINDOW_SECS`; docs/media.md).
    pub stream: super::stream::StreamSettings,
    /// `TROUPE_ACK_REACTION` (e.g. 👀), unset by default: the persona's reaction on a message
    /// while it makes the reply, taken back once the reply is sent (Discord, Telegram;
    /// docs/media.md "Reactions and feedback").
    pub ack_reaction: Option<String>,
}

/// Whether personas see images: `TROUPE_VISION` (`vision` in troupe.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Vision {
    /// `off`: images are refused on the API and only named elsewhere.
    Off,
    /// `auto` (the default): images go to models known to take them (`media::takes_images`).
    Auto,
    /// `on`: every persona's model is sent images (for a vision model the list misses).
    On,
}

impl std::str::FromStr for Vision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "0" => Ok(Vision::Off),
            "auto" => Ok(Vision::Auto),
            "on" | "true" | "1" => Ok(Vision::On),
            other => Err(format!("`{other}` is not one of off, auto, on")),
        }
    }
}

impl TryFrom<String> for Vision {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// Images in messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaSettings {
    pub vision: Vision,
    /// `TROUPE_MEDIA_MAX_BYTES`, default 10 MiB: the largest image fetched or accepted.
    pub max_bytes: usize,
    /// `TROUPE_TRANSCRIBE`, default on: voice notes and audio are transcribed (media::voice).
    pub transcribe: bool,
    /// `TROUPE_TRANSCRIBE_MODEL`, default `whisper-1`: the model of the persona's provider
    /// asked for transcripts (`POST {base}/audio/transcriptions`).
    pub transcribe_model: String,
    /// `TROUPE_MEDIA_KEEP_DAYS`, default 30: images and audio posted to the API are kept
    /// this long in the `media` table (for the console's history), then deleted; 0 keeps
    /// them for ever.
    pub keep_days: u32,
}

/// What agents remember beyond the room's recent window. Each runs as a background model
/// call after a reply; a cadence of 0 turns it off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySettings {
    /// `TROUPE_MEMORY_SUMMARY_EVERY`, default 16: once this many messages have fallen out of
    /// the recent window (`TROUPE_HISTORY_LIMIT`) without being summarised, the model folds
    /// them into the room's rolling summary.
    pub summary_every: u32,
    /// `TROUPE_MEMORY_FACTS_EVERY`, default 8: after this many new messages from a user, the
    /// model is asked for durable facts about them.
    pub facts_every: u32,
    /// `TROUPE_MEMORY_FACTS_PER_USER`, default 50: facts kept per user and agent, the newest.
    pub facts_per_user: u32,
}

/// How agents work: history, prompt budget, model calls, the bus, retries and memory.
pub(super) fn agent_settings(
    layered: &Layered<'_>,
    file: &FileConfig,
) -> anyhow::Result<AgentSettings> {
    Ok(AgentSettings {
        history_limit: layered.parse("TROUPE_HISTORY_LIMIT", file.history_limit, 32)?,
        prompt_budget_chars: layered.parse(
            "TROUPE_PROMPT_BUDGET_CHARS",
            file.prompt_budget_chars,
            24_000,
        )?,
        model_timeout: Duration::from_secs(layered.parse(
            "TROUPE_MODEL_TIMEOUT_SECS",
            file.model_timeout_secs,
            60,
        )?),
        model_concurrency: layered
            .parse("TROUPE_MODEL_CONCURRENCY", file.model_concurrency, 16)?
            .max(1),
        bus_capacity: layered
            .parse("TROUPE_BUS_CAPACITY", file.bus_capacity, 10_000)?
            .max(1),
        turns_in_flight: layered
            .parse(
                "TROUPE_TURNS_IN_FLIGHT",
                file.turns_in_flight,
                DEFAULT_TURNS_IN_FLIGHT,
            )?
            .max(1),
        max_attempts: layered
            .parse("TROUPE_MAX_ATTEMPTS", file.max_attempts, 5)?
            .max(1),
        bot_turns: layered.parse("TROUPE_BOT_TURNS", file.bot_turns, 3)?,
        memory: memory_settings(layered, file)?,
        media: MediaSettings {
            vision: layered.parse("TROUPE_VISION", file.vision, Vision::Auto)?,
            max_bytes: layered
                .parse("TROUPE_MEDIA_MAX_BYTES", file.media_max_bytes, 10 << 20)?
                .max(1),
            transcribe: layered
                .parse("TROUPE_TRANSCRIBE", file.transcribe, super::Switch(true))?
                .0,
            transcribe_model: layered.parse(
                "TROUPE_TRANSCRIBE_MODEL",
                file.transcribe_model.clone(),
                "whisper-1".to_string(),
            )?,
            keep_days: layered.parse("TROUPE_MEDIA_KEEP_DAYS", file.media_keep_days, 30)?,
        },
        stream: super::stream::stream_settings(layered, file)?,
        ack_reaction: ack_reaction(
            layered.string("TROUPE_ACK_REACTION", file.ack_reaction.clone()),
        )?,
    })
}

/// `TROUPE_ACK_REACTION`: one Unicode emoji, or unset. It goes into a Discord URL path and a
/// Telegram request, so anything else is refused at start.
fn ack_reaction(raw: Option<String>) -> anyhow::Result<Option<String>> {
    let Some(raw) = raw else { return Ok(None) };
    let emoji = raw.trim();
    if !troupe_connectors::Reaction::plausible_emoji(emoji) {
        anyhow::bail!(
            "TROUPE_ACK_REACTION must be one Unicode emoji such as 👀 (Telegram takes only its \
             reaction emoji), not `{raw}`; unset it to react with nothing"
        );
    }
    Ok(Some(emoji.to_string()))
}

/// `TROUPE_MEMORY_*`: summaries and facts.
fn memory_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<MemorySettings> {
    Ok(MemorySettings {
        summary_every: layered.parse(
            "TROUPE_MEMORY_SUMMARY_EVERY",
            file.memory_summary_every,
            16,
        )?,
        facts_every: layered.parse("TROUPE_MEMORY_FACTS_EVERY", file.memory_facts_every, 8)?,
        facts_per_user: layered.parse(
            "TROUPE_MEMORY_FACTS_PER_USER",
            file.memory_facts_per_user,
            50,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use crate::config::Config;

    #[test]
    fn memory_cadences_can_be_turned_off() {
        let c = Config::from_env(env(&[
            ("TROUPE_MEMORY_SUMMARY_EVERY", "0"),
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
        ]))
        .unwrap();
        assert_eq!(c.agent.memory.summary_every, 0);
        assert_eq!(c.agent.memory.facts_every, 0);
        let err = Config::from_env(env(&[("TROUPE_MEMORY_FACTS_EVERY", "-1")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_MEMORY_FACTS_EVERY"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_number_names_the_variable() {
        let err = Config::from_env(env(&[("TROUPE_HISTORY_LIMIT", "lots")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_HISTORY_LIMIT"), "{err}");
    }
}
