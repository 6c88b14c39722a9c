//! Tool calling through the provider (issue 33): the tools a step offers go out as the
//! vendor's native tool definitions (genai maps them to OpenAI's `tools`, Anthropic's
//! `tool_use`, Ollama's `tools`), and the model's answer comes back either as text or as tool
//! calls. The earlier steps of the turn (the calls and their results) are replayed as
//! assistant and tool messages after the persona's prompt.
//!
//! Names: troupe calls a tool `<server>.<tool>`, but OpenAI allows only `[a-zA-Z0-9_-]` (64
//! at most) in a function name, so on the wire the dot becomes `__` and any other character
//! `_`; a call is mapped back by looking its wire name up among the step's tools, and a name
//! the step did not offer is kept as the model wrote it (the agent refuses it).

use genai::chat::{ChatMessage, ChatRequest, Tool, ToolResponse};
use serde_json::Value;

use super::client::request_of;
use crate::persona::Prompt;

/// One tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// troupe's name: `<server>.<tool>`.
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub schema: Value,
}

/// One call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call, echoed with its result.
    pub id: String,
    /// troupe's name (`<server>.<tool>`) when the step offered it, else the wire name.
    pub name: String,
    pub arguments: Value,
}

/// One earlier step of the turn: what the model asked for and what it got back.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub calls: Vec<ToolCall>,
    /// One result per call, in the same order: the text the model reads.
    pub results: Vec<String>,
}

/// What one step offers and what came before it. No tools: the model must answer in text
/// (the last step at the cap).
#[derive(Debug, Clone, Copy)]
pub struct ToolRound<'a> {
    pub tools: &'a [ToolSpec],
    pub exchanges: &'a [Exchange],
}

/// The name a tool has on the wire: `[a-zA-Z0-9_-]{1,64}`.
pub fn wire_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        match c {
            '.' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.truncate(64);
    out
}

/// The chat request of `prompt`, with the tools `round` offers and the turn's earlier steps
/// replayed after it; the prompt alone without a round.
pub(super) fn request(prompt: &Prompt, round: Option<ToolRound<'_>>) -> ChatRequest {
    let mut request = request_of(prompt);
    let Some(round) = round else {
        return request;
    };
    for exchange in round.exchanges {
        let calls: Vec<genai::chat::ToolCall> = exchange
            .calls
            .iter()
            .map(|c| genai::chat::ToolCall {
                call_id: c.id.clone(),
                fn_name: wire_name(&c.name),
                fn_arguments: c.arguments.clone(),
                thought_signatures: None,
            })
            .collect();
        request = request.append_message(ChatMessage::from(calls));
        for (call, result) in exchange.calls.iter().zip(&exchange.results) {
            request = request.append_message(ChatMessage::from(ToolResponse::new(
                call.id.clone(),
                result.clone(),
            )));
        }
    }
    if !round.tools.is_empty() {
        request = request.with_tools(round.tools.iter().map(|t| {
            Tool::new(wire_name(&t.name))
                .with_description(t.description.clone())
                .with_schema(t.schema.clone())
        }));
    }
    request
}

/// The calls the model asked for, named as troupe names them where the step offered them;
/// none for a call that was no step of a turn with tools.
pub(super) fn calls_of<'c>(
    round: Option<ToolRound<'_>>,
    calls: impl IntoIterator<Item = &'c genai::chat::ToolCall>,
) -> Vec<ToolCall> {
    let Some(round) = round else {
        return Vec::new();
    };
    calls
        .into_iter()
        .map(|c| ToolCall {
            id: c.call_id.clone(),
            name: round
                .tools
                .iter()
                .find(|t| wire_name(&t.name) == c.fn_name)
                .map(|t| t.name.clone())
                .unwrap_or_else(|| c.fn_name.clone()),
            arguments: c.fn_arguments.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_fit_openai() {
        assert_eq!(wire_name("weather.forecast"), "weather__forecast");
        assert_eq!(wire_name("a.b/c d"), "a__b_c_d");
        assert_eq!(wire_name(&"x".repeat(100)).len(), 64);
    }
}
