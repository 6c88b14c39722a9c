//! Recall and compose: what the prompt draws on (the room's recent messages, its summary,
//! the sender's facts, the thread as the platform knows it, knowledge), and the prompt made
//! of it and the character.

use std::time::Duration;
use troupe_connectors::{ClientTurn, ContextLine, Inbound, TurnSpeaker};

use super::Agent;
use super::turn::{Step, Turn};
use crate::persona::{self, HistoryLine, Persona, Prompt, PromptInput};
use crate::rooms::actions::Quoted;
use crate::storage::{MemoryMessage, RoomContext};

/// How long the prompt waits for the platform's thread context.
const THREAD_CONTEXT_WAIT: Duration = Duration::from_secs(5);

/// What `recall` found for a message, owned, for `compose` to borrow from.
pub(super) struct Recall {
    /// The room's recent messages, oldest first.
    pub(super) recent: Vec<MemoryMessage>,
    /// The room's summary and the sender's facts.
    pub(super) memory: crate::memory::Recalled,
    /// The thread above the message, as its platform knows it.
    pub(super) thread: Vec<ContextLine>,
    /// Knowledge for the prompt.
    pub(super) hits: Vec<crate::knowledge::Hit>,
}

/// A prompt, and whether anything it quotes (history, thread, documents, summary, facts,
/// names) holds an action marker: then no action the reply proposes is honoured.
pub(super) struct Composed {
    pub(super) prompt: Prompt,
    pub(super) quoted: Quoted,
}

impl Agent {
    /// Recall: what the prompt draws on. The room's recent messages (the stored history
    /// does not hold this message yet: it is recorded with the reply, in one transaction),
    /// its summary and the sender's facts, the thread above the message as the platform
    /// knows it, and knowledge for this room and the whole agent (documents attached to the
    /// message become the room's knowledge first; a failed or slow search answers without
    /// it, see Knowledge::for_prompt).
    pub(super) async fn recall(&self, turn: &Turn<'_>, room: RoomContext) -> Step<Recall> {
        let inbound = turn.inbound();
        let room_key = inbound.room.key();
        // A client that keeps its own conversation (the OpenAI-compatible API, stateless)
        // sent the history itself: the room's would repeat it, and its summary and the
        // thread with it (issue 35). With no messages recalled, no summary is read.
        if client_turns(inbound).is_some() {
            let memory = self.memory.recall(&room_key, 0, inbound, None).await?;
            let hits = self.knowledge_for(inbound, &room_key).await;
            return Ok(Recall {
                recent: Vec::new(),
                memory,
                thread: Vec::new(),
                hits,
            });
        }
        // Read with the room's controls, unless only the room's controls made it answer
        // (a followed room).
        let recent = match room.recent {
            Some(recent) => recent,
            None => {
                self.store
                    .recent_messages(&self.id, &room_key, i64::from(self.settings.history_limit))
                    .await?
            }
        };
        let memory = self
            .memory
            .recall(&room_key, recent.len(), inbound, room.summary)
            .await?;
        let thread = self.thread_context(inbound).await;
        let hits = self.knowledge_for(inbound, &room_key).await;
        Ok(Recall {
            recent,
            memory,
            thread,
            hits,
        })
    }

    /// Knowledge for the message's prompt (documents attached to it become the room's
    /// knowledge first).
    async fn knowledge_for(
        &self,
        inbound: &Inbound,
        room_key: &troupe_connectors::RoomKey,
    ) -> Vec<crate::knowledge::Hit> {
        let Some(k) = &self.knowledge else {
            return Vec::new();
        };
        if !inbound.attachments.is_empty() {
            k.ingest_attachments(&self.id, room_key, &inbound.attachments)
                .await;
        }
        k.for_prompt(&self.id, room_key, &inbound.text).await
    }

    /// The messages above `inbound` in its thread that its platform knows, oldest first;
    /// nothing when no connector is registered, on error, or after `THREAD_CONTEXT_WAIT`.
    pub(super) async fn thread_context(&self, inbound: &Inbound) -> Vec<ContextLine> {
        let Some(connector) = self.connector(inbound.platform()) else {
            return Vec::new();
        };
        match tokio::time::timeout(THREAD_CONTEXT_WAIT, connector.thread_context(inbound)).await {
            Ok(lines) => lines,
            Err(_) => {
                tracing::warn!(
                    wait_secs = THREAD_CONTEXT_WAIT.as_secs(),
                    "the thread's context took too long; answering without it"
                );
                Vec::new()
            }
        }
    }

    /// Compose: the prompt, from the character and what was recalled. The thread's lines
    /// that troupe already remembers are not repeated; the message itself comes last. It
    /// reports whether anything it quotes holds an action marker (`rooms::actions`).
    pub(super) fn compose(&self, turn: &Turn<'_>, recall: &Recall) -> Composed {
        let (persona, inbound) = (&turn.mind.persona, turn.inbound());
        let Recall {
            recent,
            memory,
            thread,
            hits,
        } = recall;
        let facts: Vec<&str> = memory.facts.iter().map(String::as_str).collect();
        let history = history_of(persona, inbound, recent, thread);
        let knowledge: Vec<persona::KnowledgeItem<'_>> = hits
            .iter()
            .map(|h| persona::KnowledgeItem {
                source: &h.source,
                text: &h.text,
            })
            .collect();
        let mut prompt = persona::compose(
            persona,
            &PromptInput {
                platform: inbound.platform(),
                sender_name: &inbound.author.name,
                history: &history,
                knowledge: &knowledge,
                seed: seed_for(inbound),
                budget_chars: self
                    .settings
                    .prompt_budget_chars
                    .saturating_sub(crate::rooms::actions::INSTRUCTION.len()),
                summary: memory.summary.as_deref(),
                facts: &facts,
            },
        );
        // The plain-language room controls ride on the reply itself (rooms::actions).
        prompt.system.push_str(crate::rooms::actions::INSTRUCTION);
        // A client's own system message comes after the character, as its operator's
        // instruction, never in its place (docs/openai.md).
        if let Some(instruction) = inbound.client.as_ref().and_then(|c| c.instruction.as_ref()) {
            prompt.system.push_str(OPERATOR_INSTRUCTION);
            prompt.system.push_str(instruction);
        }
        // Everything quoted, whether or not the budget kept it: a marker anywhere in what
        // other people wrote (or named themselves) could be the one the model repeats.
        let marked = crate::rooms::actions::holds_marker;
        let quotes_marker = history
            .iter()
            .any(|l| marked(l.text) || marked(l.author_name))
            || knowledge.iter().any(|k| marked(k.text) || marked(k.source))
            || memory.summary.as_deref().is_some_and(marked)
            || facts.iter().any(|f| marked(f));
        Composed {
            prompt,
            quoted: if quotes_marker {
                Quoted::Marker
            } else {
                Quoted::NoMarker
            },
        }
    }

    /// The console's "why" panel (`crate::why`): what this prompt was made of.
    pub(super) fn explain(&self, turn: &Turn<'_>, recall: &Recall, prompt: &Prompt) {
        crate::why::record(
            &self.id,
            turn.inbound(),
            &recall.recent,
            &recall.memory,
            &recall.hits,
            prompt,
        );
    }
}

/// The conversation the prompt quotes, oldest first, ending with the message: a stateless
/// client's turns (`recall` left the room's out; the persona's by its name, the user's by
/// the sender's), the thread's lines troupe does not already remember, the room's recent
/// messages.
fn history_of<'a>(
    persona: &'a Persona,
    inbound: &'a Inbound,
    recent: &'a [MemoryMessage],
    thread: &'a [ContextLine],
) -> Vec<HistoryLine<'a>> {
    let client = client_turns(inbound)
        .unwrap_or_default()
        .iter()
        .map(|turn| HistoryLine {
            author_name: match turn.speaker {
                TurnSpeaker::Persona => &persona.name,
                TurnSpeaker::User => &inbound.author.name,
            },
            text: &turn.text,
        });
    let thread = thread
        .iter()
        .filter(|c| c.text != inbound.text && !recent.iter().any(|m| m.text == c.text))
        .map(|c| HistoryLine {
            author_name: &c.author_name,
            text: &c.text,
        });
    let recent = recent.iter().map(|m| HistoryLine {
        author_name: &m.author_name,
        text: &m.text,
    });
    let this = HistoryLine {
        author_name: &inbound.author.name,
        text: &inbound.text,
    };
    client
        .chain(thread)
        .chain(recent)
        .chain(std::iter::once(this))
        .collect()
}

/// What introduces a client's system message in the prompt: the persona's character stays
/// first and whole; the app that calls the API adds its instruction after it.
const OPERATOR_INSTRUCTION: &str = "\n\n# Instructions from the app this conversation happens in\n";

/// The turns a stateless client sent with its message, oldest first; `None` for a message
/// whose room memory is its history.
fn client_turns(inbound: &Inbound) -> Option<&[ClientTurn]> {
    inbound.client.as_ref()?.turns.as_deref()
}

/// The sampling seed for a message: stable across a re-drive of the same message, so a
/// retried prompt is the same prompt, even when another build or replica drives it again
/// (issue 13): the bus's stable hash, not std's `DefaultHasher`, which promises neither.
fn seed_for(inbound: &Inbound) -> u64 {
    let key = format!("{}\u{1f}{}", inbound.room.key(), inbound.id);
    crate::bus::nats::stable_hash(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::tests::msg;
    use troupe_connectors::Platform;

    /// The seed is FNV-1a over the room key and the message id: the same value in every
    /// build and on every replica, so a re-drive after an upgrade samples the same prompt.
    #[test]
    fn the_seed_is_the_same_in_every_build() {
        let inbound = msg(Platform::Telegram, "hi");
        assert_eq!(seed_for(&inbound), 3_991_402_458_121_993_667);
        let mut other = msg(Platform::Telegram, "hi");
        other.id = troupe_connectors::MessageId::new("2");
        assert_ne!(seed_for(&other), seed_for(&inbound));
    }
}
