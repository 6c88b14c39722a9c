//! Built-in tools (issue 33, docs/tools.md): what troupe itself can do for a model, offered
//! like MCP tools and allowed by the same room policy (`settings.troupe.tools`).
//!
//! - `knowledge.search`: the persona's own knowledge, scoped as a reply's retrieval is
//!   (the agent's documents and this room's, never another room's);
//! - `memory.remember`, `memory.forget`: a fact about the person speaking, and only them:
//!   the subject is the message's author, never an argument, so a model cannot write (or
//!   erase) what the persona knows about anyone else;
//! - `web.fetch`: a page, through the fetch policy (`fetch.rs`: public addresses only,
//!   bounded time and bytes), and only when the operator turned it on
//!   (`TROUPE_TOOL_WEB_FETCH`), since a model choosing URLs is a stranger choosing them.
//!
//! A persona turns them on by name in `settings.troupe.tools.builtin`; none is on by
//! default. Their results are capped and fenced as untrusted by the toolbox, as an MCP
//! server's are. This module must not decide who may call what: that is the room policy's
//! and the agent's.

use serde_json::{Value, json};
use troupe_connectors::{AgentId, Inbound};

use super::mcp::CallError;
use crate::config::ToolSettings;
use crate::fetch::{FetchError, Fetcher};
use crate::provider::ToolSpec;
use crate::storage::{FactSubject, Store};

/// The most bytes `web.fetch` downloads; a larger page is refused, not read.
pub const WEB_FETCH_MAX_BYTES: usize = 2 * 1024 * 1024;
/// The longest fact `memory.remember` keeps (as long as a learned one may be).
const MAX_FACT_CHARS: usize = 200;
/// Passages `knowledge.search` returns by default, and at most.
const SEARCH_LIMIT: usize = 5;
const SEARCH_LIMIT_MAX: usize = 10;

/// One built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    KnowledgeSearch,
    MemoryRemember,
    MemoryForget,
    WebFetch,
}

const ALL: [Builtin; 4] = [
    Builtin::KnowledgeSearch,
    Builtin::MemoryRemember,
    Builtin::MemoryForget,
    Builtin::WebFetch,
];

impl Builtin {
    pub fn name(self) -> &'static str {
        match self {
            Builtin::KnowledgeSearch => "knowledge.search",
            Builtin::MemoryRemember => "memory.remember",
            Builtin::MemoryForget => "memory.forget",
            Builtin::WebFetch => "web.fetch",
        }
    }

    pub fn parse(name: &str) -> Option<Builtin> {
        ALL.into_iter().find(|b| b.name() == name)
    }

    /// The part before the dot: an MCP server of this name would shadow the built-in.
    pub fn namespace(self) -> &'static str {
        self.name().split_once('.').map_or("", |(ns, _)| ns)
    }

    /// How the model is offered it.
    pub fn spec(self) -> ToolSpec {
        let (description, schema) = match self {
            Builtin::KnowledgeSearch => (
                "Searches your own knowledge (the documents you were given) and returns the best passages with their sources.",
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX,
                              "description": "How many passages (default 5)."}
                }, "required": ["query"]}),
            ),
            Builtin::MemoryRemember => (
                "Remembers a lasting fact about the person you are talking to (only them), for later conversations.",
                json!({"type": "object", "properties": {
                    "fact": {"type": "string", "description": "One short fact about them, e.g. `prefers tea`."}
                }, "required": ["fact"]}),
            ),
            Builtin::MemoryForget => (
                "Forgets a fact you remember about the person you are talking to (only them).",
                json!({"type": "object", "properties": {
                    "fact": {"type": "string", "description": "The fact, or words from it."}
                }, "required": ["fact"]}),
            ),
            Builtin::WebFetch => (
                "Fetches a public web page and returns its text.",
                json!({"type": "object", "properties": {
                    "url": {"type": "string", "description": "An http or https URL."}
                }, "required": ["url"]}),
            ),
        };
        ToolSpec {
            name: self.name().to_string(),
            description: description.to_string(),
            schema,
        }
    }
}

/// The built-ins a persona turns on (`settings.troupe.tools.builtin`), those the operator
/// allows, and what is wrong with the setting (a refusal names the variable to set).
pub fn builtins_of(raw: &Value, settings: &ToolSettings) -> (Vec<Builtin>, Vec<String>) {
    let mut on = Vec::new();
    let mut problems = Vec::new();
    let Some(listed) = raw.pointer("/settings/troupe/tools/builtin") else {
        return (on, problems);
    };
    let Some(names) = listed
        .as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
    else {
        problems.push(format!(
            "settings.troupe.tools.builtin: expected a list of names ({})",
            known()
        ));
        return (on, problems);
    };
    for name in names {
        let Some(builtin) = Builtin::parse(name) else {
            problems.push(format!(
                "settings.troupe.tools.builtin: unknown tool `{name}`; the built-ins are {}",
                known()
            ));
            continue;
        };
        if builtin == Builtin::WebFetch && !settings.web_fetch {
            problems.push(
                "settings.troupe.tools.builtin: `web.fetch` is off; the operator turns it on with TROUPE_TOOL_WEB_FETCH=true"
                    .into(),
            );
            continue;
        }
        if !on.contains(&builtin) {
            on.push(builtin);
        }
    }
    (on, problems)
}

fn known() -> String {
    ALL.map(Builtin::name).join(", ")
}

/// What a built-in may touch for one message: the persona's stores, and who is speaking
/// where. Built by the agent for each turn.
pub(crate) struct Context<'a> {
    pub agent_id: &'a AgentId,
    /// The message being answered: its author is the only subject of `memory.*`, its room
    /// the scope of `knowledge.search`.
    pub inbound: &'a Inbound,
    pub store: &'a Store,
    pub knowledge: Option<&'a crate::knowledge::Knowledge>,
    /// For its cache of facts, dropped after a write.
    pub memory: &'a crate::memory::Memory,
    /// `TROUPE_MEMORY_FACTS_PER_USER`; `None` when facts are off
    /// (`TROUPE_MEMORY_FACTS_EVERY=0`), since a fact would then never be recalled.
    pub facts_keep: Option<i64>,
}

/// Runs `builtin` with the model's `arguments`: the text for the model, or why not.
pub(crate) async fn run(
    builtin: Builtin,
    arguments: &Value,
    ctx: &Context<'_>,
    fetcher: Option<&Fetcher>,
) -> Result<String, CallError> {
    match builtin {
        Builtin::KnowledgeSearch => search(arguments, ctx).await,
        Builtin::MemoryRemember => remember(arguments, ctx).await,
        Builtin::MemoryForget => forget(arguments, ctx).await,
        Builtin::WebFetch => match fetcher {
            Some(fetcher) => fetch(arguments, fetcher).await,
            None => Err(failed("web.fetch is off (TROUPE_TOOL_WEB_FETCH)")),
        },
    }
}

fn failed(why: &str) -> CallError {
    CallError::Failed(why.to_string())
}

/// The string argument `key`, trimmed and not empty.
fn text_arg<'v>(arguments: &'v Value, key: &str) -> Result<&'v str, CallError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| CallError::Failed(format!("`{key}`: a non-empty string is required")))
}

async fn search(arguments: &Value, ctx: &Context<'_>) -> Result<String, CallError> {
    let query = text_arg(arguments, "query")?;
    let limit = arguments
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(SEARCH_LIMIT, |n| (n as usize).clamp(1, SEARCH_LIMIT_MAX));
    let knowledge = ctx
        .knowledge
        .ok_or_else(|| failed("this persona has no knowledge to search"))?;
    let room = ctx.inbound.room.key();
    let timeout = knowledge.settings().search_timeout;
    let hits = tokio::time::timeout(
        timeout,
        knowledge.search(ctx.agent_id, Some(&room), query, limit),
    )
    .await
    .map_err(|_| CallError::Timeout(timeout))?
    .map_err(|e| CallError::Failed(format!("the search failed: {e}")))?;
    if hits.is_empty() {
        return Ok("No passage matched.".into());
    }
    Ok(hits
        .iter()
        .enumerate()
        .map(|(i, h)| format!("{}. {} (part {}): {}", i + 1, h.source, h.chunk, h.text))
        .collect::<Vec<_>>()
        .join("\n\n"))
}

/// The speaker as a fact's subject, when facts are kept about them.
fn speaker<'a>(ctx: &'a Context<'_>) -> Result<FactSubject<'a>, CallError> {
    if ctx.facts_keep.is_none() {
        return Err(failed(
            "this persona keeps no facts about people (TROUPE_MEMORY_FACTS_EVERY=0)",
        ));
    }
    if !crate::memory::learns_about(ctx.inbound) {
        return Err(failed(
            "no facts are kept about bots or anonymous API callers",
        ));
    }
    Ok(FactSubject {
        agent_id: ctx.agent_id,
        platform: ctx.inbound.platform(),
        user_id: &ctx.inbound.author.id,
    })
}

async fn remember(arguments: &Value, ctx: &Context<'_>) -> Result<String, CallError> {
    let fact = text_arg(arguments, "fact")?;
    // One line: a fact is one bullet of a later prompt.
    let fact = fact.split_whitespace().collect::<Vec<_>>().join(" ");
    if fact.chars().count() > MAX_FACT_CHARS {
        return Err(CallError::Failed(format!(
            "a fact is at most {MAX_FACT_CHARS} characters"
        )));
    }
    if crate::rooms::actions::holds_marker(&fact) {
        return Err(failed("a fact may not hold a room-control marker"));
    }
    let who = speaker(ctx)?;
    let keep = ctx.facts_keep.unwrap_or(0);
    let room = ctx.inbound.room.key();
    let added = ctx
        .store
        .remember_user_fact(who, &fact, &room, keep, crate::storage::now_ms())
        .await
        .map_err(|e| CallError::Failed(format!("could not store the fact: {e}")))?;
    ctx.memory.forget_cached_facts(who).await;
    Ok(if added {
        format!("Remembered about {}: {fact}", ctx.inbound.author.name)
    } else {
        format!("Already known about {}: {fact}", ctx.inbound.author.name)
    })
}

async fn forget(arguments: &Value, ctx: &Context<'_>) -> Result<String, CallError> {
    let fact = text_arg(arguments, "fact")?;
    let who = speaker(ctx)?;
    let gone = ctx
        .store
        .forget_user_fact(who, fact)
        .await
        .map_err(|e| CallError::Failed(format!("could not forget the fact: {e}")))?;
    ctx.memory.forget_cached_facts(who).await;
    Ok(if gone.is_empty() {
        "No fact about them matched.".into()
    } else {
        format!("Forgotten: {}", gone.join("; "))
    })
}

async fn fetch(arguments: &Value, fetcher: &Fetcher) -> Result<String, CallError> {
    let url = text_arg(arguments, "url")?;
    let body = match fetcher.fetch_capped(url, WEB_FETCH_MAX_BYTES).await {
        Ok(body) => body,
        Err(FetchError::Timeout { timeout, .. }) => return Err(CallError::Timeout(timeout)),
        Err(FetchError::TooLarge { .. }) => {
            return Err(CallError::Failed(format!(
                "the page is over {WEB_FETCH_MAX_BYTES} bytes"
            )));
        }
        // The error names the host, never the URL.
        Err(e) => return Err(CallError::Failed(format!("not fetched: {e}"))),
    };
    let text = String::from_utf8_lossy(&body);
    let looks_html = {
        let head: String = text.chars().take(512).collect::<String>().to_lowercase();
        head.contains("<html") || head.contains("<!doctype html") || head.contains("<body")
    };
    Ok(if looks_html {
        text_of_html(&text)
    } else {
        text.into_owned()
    })
}

/// The readable text of an HTML page: tags dropped, `script` and `style` contents too, a
/// few entities decoded, whitespace collapsed. A scan, not a parser: the page is a
/// stranger's, and this only has to be good enough for a model to read.
fn text_of_html(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    while i < html.len() {
        let rest = &lower[i..];
        if rest.starts_with('<') {
            // A script's or a style's content is not text: skip to its closing tag.
            let skip_to = ["script", "style"]
                .iter()
                .find(|tag| rest[1..].starts_with(**tag))
                .and_then(|tag| rest.find(&format!("</{tag}")));
            let from = i + skip_to.unwrap_or(0);
            match lower[from..].find('>') {
                Some(end) => i = from + end + 1,
                None => break,
            }
            out.push(' ');
            continue;
        }
        let next = rest.find('<').map_or(html.len(), |n| i + n);
        out.push_str(&html[i..next]);
        i = next;
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_fit_the_wire() {
        for b in ALL {
            assert_eq!(Builtin::parse(b.name()), Some(b));
            assert_eq!(b.spec().name, b.name());
        }
        assert_eq!(Builtin::parse("memory.rememberall"), None);
        assert_eq!(Builtin::WebFetch.namespace(), "web");
    }

    #[test]
    fn web_fetch_needs_the_operator() {
        let raw = json!({"settings": {"troupe": {"tools": {
            "builtin": ["knowledge.search", "web.fetch", "shell.run"]
        }}}});
        let (on, problems) = builtins_of(&raw, &ToolSettings::default());
        assert_eq!(on, vec![Builtin::KnowledgeSearch]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("TROUPE_TOOL_WEB_FETCH")));
        assert!(problems.iter().any(|p| p.contains("shell.run")));
        let allowed = ToolSettings {
            web_fetch: true,
            ..ToolSettings::default()
        };
        let (on, _) = builtins_of(&raw, &allowed);
        assert_eq!(on, vec![Builtin::KnowledgeSearch, Builtin::WebFetch]);
        let (on, problems) = builtins_of(&json!({}), &allowed);
        assert!(on.is_empty() && problems.is_empty());
    }

    #[test]
    fn html_becomes_text() {
        let page = "<!doctype html><html><head><style>p{x:1}</style><script>alert('<b>')</script></head>\
                    <body><p>Tides &amp; <b>moons</b></p>\n<p>rise</p></body></html>";
        assert_eq!(text_of_html(page), "Tides & moons rise");
        assert_eq!(text_of_html("a <unclosed"), "a");
    }
}
