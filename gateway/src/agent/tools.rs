//! A turn with tools (issue 33, docs/tools.md): the model is offered the tools this room may
//! use; the calls it asks for run (in parallel when it asks for several), their results go
//! back to it, and this repeats up to `TROUPE_TOOL_MAX_STEPS` model calls that may ask for
//! tools; at the cap it is called once more without tools, for an answer. Each step is one
//! model call for spend, budgets and the scheduler (`model_call`), and a budget reached
//! mid-turn ends the turn with what the persona has. Every step streams where the turn is
//! shown live; a step that asks for tools takes its text back, so what is shown is the
//! text written after the last tool step.
//!
//! Results are data: capped and fenced by the toolbox, never read for room-control markers
//! (a marker in a result marks the reply as quoting one, so it cannot act). A tool its
//! server marks destructive runs only for the room's admin. Logs carry the tool, outcome,
//! size and time of each call, never its arguments; the why panel shows them to the
//! operator.
//!
//! It also owns what any turn's model calls answered (`Answer`, with its `origin`), which
//! `model.rs` builds for a turn without tools: kept here so that `model` imports `tools`
//! and not the other way round.

use std::sync::Arc;

use troupe_connectors::Inbound;

use super::turn::Turn;
use super::{Agent, Mind};
use crate::live::Live;
use crate::outcome::Origin;
use crate::persona::Prompt;
use crate::provider::{Completion, Exchange, ProviderError, ToolCall, ToolRound, ToolSpec};
use crate::tools::{Called, Offered, Toolbox, builtin};
use crate::why::ToolCallView;

/// What this message's turn may use: the persona's toolbox and the tools its room allows.
pub(super) struct Offer {
    toolbox: Arc<Toolbox>,
    tools: Vec<Offered>,
}

/// The tools offered for `inbound`, or `None` (no toolbox, a provider without tool calling,
/// a room not opted in, or no tool allowed): then the turn is the plain one call.
pub(super) fn offer(mind: &Mind, inbound: &Inbound) -> Option<Offer> {
    let toolbox = mind.tools.as_ref()?;
    if !mind.provider.offers(crate::provider::Feature::Tools) {
        return None;
    }
    let tools = toolbox.offered(inbound);
    if tools.is_empty() {
        return None;
    }
    Some(Offer {
        toolbox: toolbox.clone(),
        tools,
    })
}

/// The persona's MCP servers whose tools a turn is not offered, for the why panel.
pub(super) fn missing_servers(toolbox: &Toolbox) -> Vec<crate::why::MissingServer> {
    toolbox
        .missing()
        .into_iter()
        .map(|s| crate::why::MissingServer {
            server: s.name,
            state: s.state,
            detail: s.detail,
        })
        .collect()
}

impl Agent {
    /// The turn: model steps with tools, then the answer.
    pub(super) async fn tool_turn(
        &self,
        turn: &Turn<'_>,
        prompt: &Prompt,
        offer: Offer,
        live: Option<&Live>,
    ) -> Result<Answer, ProviderError> {
        let inbound = turn.inbound();
        let specs: Vec<ToolSpec> = offer.tools.iter().map(|t| t.spec.clone()).collect();
        let max_steps = offer.toolbox.max_steps();
        let mut so_far = SoFar::default();
        let mut steps = 0;
        let mut origin = crate::outcome::Origin::Other;
        let ctx = self.builtin_context(inbound);
        let text = loop {
            // At the cap the model is asked for an answer, with no tools to call.
            let tools: &[ToolSpec] = if steps < max_steps { &specs } else { &[] };
            let round = ToolRound {
                tools,
                exchanges: &so_far.exchanges,
            };
            let step = self.model_call(turn, prompt, Some(round), live).await?;
            steps += 1;
            origin = origin.plus(origin_of(&step.completion, prompt));
            if step.calls.is_empty() || tools.is_empty() {
                break step.completion.text;
            }
            if let Some(text) = self.over_budget(turn, &step.completion.text).await {
                break text;
            }
            self.run_calls(inbound, &offer, step.calls, &ctx, &mut so_far)
                .await;
        };
        crate::why::record_tools(&self.id, inbound, so_far.views);
        if text.trim().is_empty() {
            return Err(ProviderError::Empty);
        }
        Ok(Answer {
            text,
            tool_marker: so_far.marker,
            origin,
        })
    }

    /// Runs the calls one step asked for, at once, and adds them and their results to
    /// `so_far` (the next step's exchanges, the why panel's views). The sender's right to
    /// a destructive tool is asked once a turn, when the first such call comes.
    async fn run_calls(
        &self,
        inbound: &Inbound,
        offer: &Offer,
        calls: Vec<ToolCall>,
        ctx: &builtin::Context<'_>,
        so_far: &mut SoFar,
    ) {
        if so_far.admin.is_none() && calls.iter().any(|c| destructive(offer, c)) {
            so_far.admin = Some(self.may_steer(inbound).await);
        }
        let admin = so_far.admin.unwrap_or(false);
        let runs = calls.iter().map(|call| self.run(offer, call, admin, ctx));
        let called: Vec<Called> = futures::future::join_all(runs).await;
        for (call, result) in calls.iter().zip(&called) {
            so_far.marker |= result.held_marker;
            so_far.views.push(ToolCallView {
                tool: call.name.clone(),
                arguments: call.arguments.to_string(),
                result_bytes: result.bytes,
                truncated: result.truncated,
                elapsed_ms: result.elapsed_ms,
                outcome: result.outcome.as_str(),
            });
        }
        so_far.exchanges.push(Exchange {
            calls,
            results: called.into_iter().map(|c| c.text).collect(),
        });
    }

    /// Runs one call the model asked for, or refuses it: a tool not offered in this room,
    /// or a destructive one for someone who is not the room's admin.
    async fn run(
        &self,
        offer: &Offer,
        call: &ToolCall,
        admin: bool,
        ctx: &builtin::Context<'_>,
    ) -> Called {
        let toolbox = &offer.toolbox;
        let called = match offer.tools.iter().find(|t| t.spec.name == call.name) {
            None => toolbox.refused(&call.name, "this tool is not available here"),
            Some(t) if t.destructive && !admin => toolbox.refused(
                &call.name,
                "this tool changes or deletes things; only the room's admin may use it",
            ),
            Some(_) => toolbox.call(&call.name, call.arguments.clone(), ctx).await,
        };
        let outcome = called.outcome.as_str();
        // The tool's name is logged only when it is one the persona has: a model's made-up
        // name would otherwise be an unbounded label and a log line a stranger writes.
        let known = offer.tools.iter().any(|t| t.spec.name == call.name);
        let tool = if known { call.name.as_str() } else { "unknown" };
        crate::metrics::tool_call(self.id.as_str(), tool, outcome);
        tracing::info!(
            tool,
            outcome,
            result_bytes = called.bytes,
            truncated = called.truncated,
            elapsed_ms = called.elapsed_ms,
            "tool called"
        );
        called
    }

    /// What the built-in tools may touch for this message: the persona's stores, and the
    /// speaker (the only subject of `memory.*`) and room (the scope of `knowledge.search`).
    fn builtin_context<'a>(&'a self, inbound: &'a Inbound) -> builtin::Context<'a> {
        let memory = &self.settings.memory;
        builtin::Context {
            agent_id: &self.id,
            inbound,
            store: &self.store,
            knowledge: self.knowledge.as_ref(),
            memory: &self.memory,
            facts_keep: (memory.facts_every > 0).then_some(i64::from(memory.facts_per_user)),
        }
    }

    /// Between steps: past a spend budget, the turn ends with what the persona has (the
    /// text it wrote beside its calls, else the budget's notice).
    async fn over_budget(&self, turn: &Turn<'_>, so_far: &str) -> Option<String> {
        let meter = turn.meter.as_ref()?;
        let inbound = turn.inbound();
        let room = inbound.room.key();
        let who = crate::spend::Who::sender(&room, inbound);
        match meter.admit(who, crate::spend::Purpose::Tool).await {
            Ok(crate::spend::Admission::Over { scope, notice }) => {
                tracing::info!(budget = scope.as_str(), "over budget in a turn with tools");
                Some(if so_far.trim().is_empty() {
                    notice.unwrap_or_else(|| {
                        "I've reached my budget for now, so I'll stop here.".to_string()
                    })
                } else {
                    so_far.to_string()
                })
            }
            _ => None,
        }
    }
}

/// What a turn's tool steps have done so far.
#[derive(Default)]
struct SoFar {
    /// The calls and their results, replayed to the model at the next step.
    exchanges: Vec<Exchange>,
    /// The calls as the why panel shows them.
    views: Vec<ToolCallView>,
    /// Whether a result held a room-control marker.
    marker: bool,
    /// Whether the sender may use destructive tools, once asked.
    admin: Option<bool>,
}

fn destructive(offer: &Offer, call: &ToolCall) -> bool {
    offer
        .tools
        .iter()
        .any(|t| t.spec.name == call.name && t.destructive)
}

/// What the turn's model calls answered: the reply's text, and whether a tool result the
/// model read held a room-control marker (the reply may then be an echo, never an order).
pub(super) struct Answer {
    pub(super) text: String,
    pub(super) tool_marker: bool,
    /// The tokens the turn's calls used, for the caller (the OpenAI-compatible `usage`).
    pub(super) origin: Origin,
}

/// The reply's origin: the model, with the tokens it used.
pub(super) fn origin_of(completion: &Completion, prompt: &Prompt) -> Origin {
    let estimate =
        |chars: usize| u32::try_from(chars.div_ceil(CHARS_PER_TOKEN)).unwrap_or(u32::MAX);
    Origin::Model {
        prompt_tokens: completion
            .prompt_tokens
            .unwrap_or_else(|| estimate(prompt.system.len() + prompt.user.len())),
        completion_tokens: completion
            .completion_tokens
            .unwrap_or_else(|| estimate(completion.text.len())),
    }
}

/// One token per this many characters, where the provider reported no count: the spend
/// ledger's estimate (`spend::accounting`), so `usage` and the ledger agree.
const CHARS_PER_TOKEN: usize = 4;
