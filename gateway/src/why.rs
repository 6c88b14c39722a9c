//! Why: what went into the prompt of a recent reply, for the console's "why" panel.
//!
//! The agent records, right after composing a prompt, the room summary, the sender's facts,
//! the recent messages and the knowledge passages (with sources and scores) it recalled,
//! each marked with whether it made it into the prompt (the prompt budget may drop old
//! history). `GET /api/agents/{agent}/rooms/{room}/messages/{messageId}/why` reads it back.
//!
//! Decision: a bounded in-memory cache per process (moka, 2,000 replies, one hour), not a
//! table. The panel explains the reply the operator just saw; keeping every prompt's
//! context forever would double what the database stores per message. On several replicas
//! only the replica that answered knows; the route then answers 404 `not_recorded`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::Serialize;
use troupe_connectors::{AgentId, Inbound, MessageId, RoomKey};

use crate::knowledge::Hit;
use crate::persona::Prompt;
use crate::storage::MemoryMessage;

/// The most contexts kept; the oldest go first.
const CAPACITY: u64 = 2_000;
/// How long one is kept.
const KEPT_FOR: Duration = Duration::from_secs(60 * 60);
/// Knowledge and history lines are cut to this many characters in the view.
const SNIPPET_CHARS: usize = 600;

type Key = (AgentId, RoomKey, MessageId);

static CONTEXTS: LazyLock<moka::sync::Cache<Key, Arc<PromptContext>>> = LazyLock::new(|| {
    moka::sync::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(KEPT_FOR)
        .build()
});

/// What one reply's prompt was composed from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptContext {
    pub summary: Option<Part>,
    pub facts: Vec<Part>,
    pub history: Vec<HistoryPart>,
    pub knowledge: Vec<Passage>,
    /// The prompt's size, system and user message together.
    pub prompt_chars: usize,
    /// The tool calls of the turn, in order (issue 33); empty without tools.
    pub tool_calls: Vec<ToolCallView>,
    /// The persona's MCP servers whose tools this prompt was not offered: still starting
    /// (they connect in the background), failed or refused, with why (issue 43).
    pub tools_missing: Vec<MissingServer>,
}

/// An MCP server whose tools were missing from a turn.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingServer {
    pub server: String,
    /// `starting`, `failed` or `refused`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One tool call of the turn: the tool, its arguments (the panel is the operator's; logs
/// never carry them), the result's size, time and outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    pub tool: String,
    pub arguments: String,
    pub result_bytes: usize,
    pub truncated: bool,
    pub elapsed_ms: u64,
    pub outcome: &'static str,
}

/// A piece of memory, and whether the prompt holds it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    pub text: String,
    pub in_prompt: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPart {
    pub author_name: String,
    pub text: String,
    pub in_prompt: bool,
}

/// A knowledge passage recalled for the message.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Passage {
    pub source: String,
    pub document_id: String,
    pub score: f64,
    pub text: String,
    pub in_prompt: bool,
}

fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Whether `text` made it into the prompt. The prompt quotes what strangers wrote (see
/// `persona::quote`: continuation lines indented, a leading `#` escaped), so the test is
/// on the text's longest line, without leading `#`s: present when the item was kept,
/// absent when the budget dropped it.
fn in_prompt(prompt: &Prompt, text: &str) -> bool {
    let probe = probe(text);
    !probe.is_empty() && holds(prompt, probe)
}

/// The line of `text` that [`in_prompt`] looks for.
fn probe(text: &str) -> &str {
    text.lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .max_by_key(|l| l.len())
        .unwrap_or("")
}

fn holds(prompt: &Prompt, probe: &str) -> bool {
    prompt.system.contains(probe) || prompt.user.contains(probe)
}

/// Which history lines made it into the prompt. The prompt keeps the newest lines and drops
/// the oldest first (`persona::prompt::compose`), so the kept ones are a suffix of `recent`:
/// a binary search for where it starts costs a handful of searches of the prompt instead of
/// one per line (32 by default, 3.5% of the message path's CPU in `perf`). A blank line
/// says nothing about the boundary, so the search steps over it, and it is never reported
/// as in the prompt.
fn history_in_prompt(prompt: &Prompt, recent: &[MemoryMessage]) -> Vec<bool> {
    let probes: Vec<&str> = recent.iter().map(|m| probe(&m.text)).collect();
    let lines: Vec<usize> = (0..probes.len())
        .filter(|&i| !probes[i].is_empty())
        .collect();
    let kept_from = lines
        .get(lines.partition_point(|&i| !holds(prompt, probes[i])))
        .map_or(probes.len(), |&i| i);
    (0..probes.len())
        .map(|i| i >= kept_from && !probes[i].is_empty())
        .collect()
}

/// Records the context of the prompt composed for `inbound`.
pub(crate) fn record(
    agent: &AgentId,
    inbound: &Inbound,
    recent: &[MemoryMessage],
    memory: &crate::memory::Recalled,
    hits: &[Hit],
    prompt: &Prompt,
) {
    let held = |text: &str| in_prompt(prompt, text);
    let context = PromptContext {
        summary: memory.summary.as_ref().map(|s| Part {
            in_prompt: held(s),
            text: snippet(s),
        }),
        facts: memory
            .facts
            .iter()
            .map(|f| Part {
                in_prompt: held(f),
                text: snippet(f),
            })
            .collect(),
        history: recent
            .iter()
            .zip(history_in_prompt(prompt, recent))
            .map(|(m, in_prompt)| HistoryPart {
                author_name: m.author_name.clone(),
                in_prompt,
                text: snippet(&m.text),
            })
            .collect(),
        knowledge: hits
            .iter()
            .map(|h| Passage {
                source: h.source.clone(),
                document_id: h.document_id.clone(),
                score: h.score,
                in_prompt: held(&h.text),
                text: snippet(&h.text),
            })
            .collect(),
        prompt_chars: prompt.system.chars().count() + prompt.user.chars().count(),
        tool_calls: Vec::new(),
        tools_missing: Vec::new(),
    };
    CONTEXTS.insert(
        (agent.clone(), inbound.room.key(), inbound.id.clone()),
        Arc::new(context),
    );
}

/// Adds the turn's tool calls to the context recorded for `inbound` (recorded before the
/// model was called).
pub(crate) fn record_tools(agent: &AgentId, inbound: &Inbound, calls: Vec<ToolCallView>) {
    let key = (agent.clone(), inbound.room.key(), inbound.id.clone());
    if let Some(context) = CONTEXTS.get(&key) {
        let mut context = (*context).clone();
        context.tool_calls = calls
            .into_iter()
            .map(|mut c| {
                c.arguments = snippet(&c.arguments);
                c
            })
            .collect();
        CONTEXTS.insert(key, Arc::new(context));
    }
}

/// Adds the servers whose tools were missing from the turn of `inbound` to its context.
pub(crate) fn record_missing_tools(
    agent: &AgentId,
    inbound: &Inbound,
    missing: Vec<MissingServer>,
) {
    if missing.is_empty() {
        return;
    }
    let key = (agent.clone(), inbound.room.key(), inbound.id.clone());
    if let Some(context) = CONTEXTS.get(&key) {
        let mut context = (*context).clone();
        context.tools_missing = missing;
        CONTEXTS.insert(key, Arc::new(context));
    }
}

/// The context recorded for a message, while it is kept.
pub(crate) fn lookup(
    agent: &AgentId,
    room: &RoomKey,
    message: &MessageId,
) -> Option<Arc<PromptContext>> {
    CONTEXTS.get(&(agent.clone(), room.clone(), message.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_cut_on_a_character_boundary() {
        let long = "é".repeat(SNIPPET_CHARS + 5);
        let cut = snippet(&long);
        assert_eq!(cut.chars().count(), SNIPPET_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(snippet("short"), "short");
    }

    #[test]
    fn quoted_items_count_as_in_the_prompt() {
        let prompt = Prompt {
            system: "# Knowledge\n\\# Ferries\nThe night ferry leaves at 23:40.\n".into(),
            user: "sam: hello\n    second line".into(),
            images: Vec::new(),
        };
        assert!(in_prompt(
            &prompt,
            "# Ferries\nThe night ferry leaves at 23:40."
        ));
        assert!(in_prompt(&prompt, "hello\nsecond line"));
        assert!(!in_prompt(&prompt, "The day ferry"));
        assert!(!in_prompt(&prompt, "  \n"));
    }

    fn said(text: &str) -> MemoryMessage {
        MemoryMessage {
            id: 0,
            room: RoomKey::new(
                troupe_connectors::Platform::Web,
                troupe_connectors::RoomId::new("r1"),
            ),
            author_id: "sam".into(),
            author_name: "sam".into(),
            text: text.into(),
            from_agent: false,
            created_at_ms: 0,
        }
    }

    #[test]
    fn the_kept_history_is_the_newest_lines_and_blank_lines_are_never_in_it() {
        let recent: Vec<MemoryMessage> = ["first", " ", "second", "third", "", "fourth", "fifth"]
            .into_iter()
            .map(said)
            .collect();
        let prompt = |kept: &[&str]| Prompt {
            system: String::new(),
            user: kept.iter().map(|t| format!("sam: {t}\n")).collect(),
            images: Vec::new(),
        };
        let exhaustive =
            |p: &Prompt| -> Vec<bool> { recent.iter().map(|m| in_prompt(p, &m.text)).collect() };
        for kept in [
            &["fifth"][..],
            &["fourth", "fifth"],
            &["third", "fourth", "fifth"],
            &["second", "third", "fourth", "fifth"],
            &["first", "second", "third", "fourth", "fifth"],
            &[],
        ] {
            let p = prompt(kept);
            assert_eq!(
                history_in_prompt(&p, &recent),
                exhaustive(&p),
                "kept {kept:?}"
            );
        }
        assert!(history_in_prompt(&prompt(&[]), &[]).is_empty());
    }
}
