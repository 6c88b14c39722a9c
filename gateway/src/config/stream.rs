//! Live replies and edits (issue 32, docs/media.md "Streaming", "Edits and deletes"):
//! whether replies stream (`TROUPE_STREAM`), how often a streamed message may be edited
//! (`TROUPE_STREAM_EDIT_MS`), and how long an edit of a question re-answers it
//! (`TROUPE_EDIT_WINDOW_SECS`).

use std::time::Duration;

use super::{FileConfig, Layered};

/// An on/off setting: `on`, `off`, `true`, `false`, `1`, `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Switch(pub bool);

impl std::str::FromStr for Switch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "true" | "1" | "yes" => Ok(Switch(true)),
            "off" | "false" | "0" | "no" => Ok(Switch(false)),
            other => Err(format!("`{other}` is neither on nor off")),
        }
    }
}

impl TryFrom<String> for Switch {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// `TROUPE_STREAM`, default on: replies are shown while the model writes them, where
    /// the platform allows (an HTTP caller asks with `"stream": true`).
    pub on: bool,
    /// `TROUPE_STREAM_EDIT_MS`, default 1000: the least time between two edits of one
    /// streamed message (Discord, Telegram).
    pub edit_every: Duration,
    /// `TROUPE_EDIT_WINDOW_SECS`, default 600: an edit of an answered message this young
    /// re-runs its turn; an older one is ignored (0 ignores every edit).
    pub edit_window: Duration,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            on: true,
            edit_every: Duration::from_millis(1000),
            edit_window: Duration::from_secs(600),
        }
    }
}

pub(super) fn stream_settings(
    layered: &Layered<'_>,
    file: &FileConfig,
) -> anyhow::Result<StreamSettings> {
    Ok(StreamSettings {
        on: layered.parse("TROUPE_STREAM", file.stream, Switch(true))?.0,
        // Below 100 ms an edit per chunk would only meet the platform's 429s.
        edit_every: Duration::from_millis(
            layered
                .parse("TROUPE_STREAM_EDIT_MS", file.stream_edit_ms, 1000)?
                .max(100),
        ),
        edit_window: Duration::from_secs(layered.parse(
            "TROUPE_EDIT_WINDOW_SECS",
            file.edit_window_secs,
            600,
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn streaming_is_on_by_default_and_turns_off() {
        let c = Config::from_env(env(&[])).unwrap();
        assert!(c.agent.stream.on);
        assert_eq!(c.agent.stream.edit_every, Duration::from_millis(1000));
        assert_eq!(c.agent.stream.edit_window, Duration::from_secs(600));
        let c = Config::from_env(env(&[("TROUPE_STREAM", "off")])).unwrap();
        assert!(!c.agent.stream.on);
        let err = Config::from_env(env(&[("TROUPE_STREAM", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_STREAM"), "{err}");
    }
}
