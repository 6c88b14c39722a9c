//! Outcomes: how the handling of a message ended, and who is waiting to hear it.
//!
//! This module sits below `ingress`, `bus` and `agent`, which all speak of outcomes: the
//! agent produces one, a caller of the ingress (the HTTP API, `troupe chat`) waits for it,
//! and a shared bus carries it to the replica where that caller waits. It does no I/O: the
//! crossing between replicas is the `OutcomeRelay` trait, which the NATS bus implements.
//!
//! What an outcome can say is closed: the reason a message was not answered is a `WhyNot`,
//! the limit it ran into a `limits::Scope`, a failure a `HandleError`. Their text forms
//! (`as_str`, and the serde names on the wire between replicas) are stable strings that the
//! HTTP API and other replicas read, so they do not change with the enums' names.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;
use troupe_connectors::AgentId;
use troupe_connectors::sync::Locked;

use crate::limits::Scope;
use crate::provider::ProviderError;
use crate::storage::JournalId;

/// Why the persona does not answer a message (see `agent::decide` for the rules). The
/// strings are what the HTTP API shows as `ignored` and what crosses between replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WhyNot {
    #[serde(rename = "message from a bot")]
    Bot,
    #[serde(rename = "room is not in the persona's allowed list")]
    NotAllowedRoom,
    #[serde(rename = "the persona ignores direct messages")]
    DirectMessagesOff,
    #[serde(rename = "not addressed to the persona")]
    NotAddressed,
    #[serde(rename = "the persona is muted in this room")]
    Muted,
    #[serde(rename = "too many bot messages in a row in this room")]
    BotTurns,
    /// A spend budget is used up (docs/spend.md).
    #[serde(rename = "the persona's spend budget is used up")]
    OverBudget,
    /// Another persona of the troupe answers it (the room's arbiter, `rooms::arbiter`).
    #[serde(rename = "another persona of the troupe answers it")]
    OtherPersona,
    /// An edit made after `TROUPE_EDIT_WINDOW_SECS` (issue 32): the first answer stands.
    #[serde(rename = "the edit came after the edit window")]
    EditTooLate,
    /// An edit or a delete of a message the persona never received.
    #[serde(rename = "an edit or delete of a message the persona never received")]
    UnknownMessage,
    /// The message was deleted: its reply was taken back, nothing is said.
    #[serde(rename = "the message was deleted")]
    Deleted,
    /// The sender or the room is not let in (issue 44, docs/access.md).
    #[serde(rename = "the sender is not let in")]
    NotLetIn,
    /// A listen-only room: remembered, never answered.
    #[serde(rename = "the room is listen-only")]
    ListenOnly,
}

impl WhyNot {
    pub fn as_str(self) -> &'static str {
        match self {
            WhyNot::Bot => "message from a bot",
            WhyNot::NotAllowedRoom => "room is not in the persona's allowed list",
            WhyNot::DirectMessagesOff => "the persona ignores direct messages",
            WhyNot::NotAddressed => "not addressed to the persona",
            WhyNot::Muted => "the persona is muted in this room",
            WhyNot::BotTurns => "too many bot messages in a row in this room",
            WhyNot::OverBudget => "the persona's spend budget is used up",
            WhyNot::OtherPersona => "another persona of the troupe answers it",
            WhyNot::EditTooLate => "the edit came after the edit window",
            WhyNot::UnknownMessage => "an edit or delete of a message the persona never received",
            WhyNot::Deleted => "the message was deleted",
            WhyNot::NotLetIn => "the sender is not let in",
            WhyNot::ListenOnly => "the room is listen-only",
        }
    }
}

impl fmt::Display for WhyNot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// `Scope` belongs to the rate limits; its text form is `Scope::as_str`. Display is given here,
// where outcomes are shown (`troupe chat`, the API's 429 detail), so that `limits` stays
// free of presentation.
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `Scope` on the wire: its `as_str` form (`user`, `room`, `agent`). A remote definition,
/// so that `limits` needs no serde; the compiler checks it against `Scope`'s variants.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Scope", rename_all = "lowercase")]
enum ScopeDef {
    User,
    Room,
    Agent,
}

/// What handling a message can fail with, for whoever waits on it. `Clone`, because one
/// outcome goes to every waiter; a storage error is kept as its text for that reason.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandleError {
    /// The model provider failed, was too slow, or is not configured.
    #[error(transparent)]
    Model(#[from] ProviderError),
    /// The database failed (most often: did not answer) for longer than a message waits for
    /// it. The message is still in the journal: it is handled at the next start, or when
    /// posted again.
    #[error("the database failed: {0}")]
    Storage(String),
    /// The message names a persona that is not loaded (removed since it was journaled).
    #[error("no persona with id `{0}` is loaded")]
    UnknownAgent(AgentId),
}

/// Who wrote a reply, and what it cost: the OpenAI-compatible API reports it as `usage`
/// (issue 35), and answers a budget's notice as the 429 it stands for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Origin {
    /// The model, in this handling, with the tokens it used (the provider's counts, or the
    /// spend ledger's estimate where it gave none).
    Model {
        prompt_tokens: u32,
        completion_tokens: u32,
    },
    /// A spend budget's notice: the message was refused, not answered.
    BudgetNotice,
    /// Anything else: a chat command's answer, a reply recorded before (a duplicate).
    #[default]
    Other,
}

impl Origin {
    /// The tokens of two calls of one turn, together (a turn with tools makes several).
    pub fn plus(self, other: Origin) -> Origin {
        match (self, other) {
            (
                Origin::Model {
                    prompt_tokens: p1,
                    completion_tokens: c1,
                },
                Origin::Model {
                    prompt_tokens: p2,
                    completion_tokens: c2,
                },
            ) => Origin::Model {
                prompt_tokens: p1.saturating_add(p2),
                completion_tokens: c1.saturating_add(c2),
            },
            (Origin::Model { .. }, _) => self,
            (_, other) => other,
        }
    }
}

/// How the agent dealt with a message.
#[derive(Debug, Clone)]
pub enum Outcome {
    Replied {
        texts: Vec<String>,
        origin: Origin,
    },
    Ignored {
        reason: WhyNot,
    },
    RateLimited {
        scope: Scope,
    },
    Failed {
        error: HandleError,
    },
    /// The message had `TROUPE_MAX_ATTEMPTS` and is not handled again; why.
    GaveUp {
        reason: String,
    },
}

impl Outcome {
    /// The `troupe_decisions_total` label of this outcome.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Outcome::Replied { .. } => "responded",
            Outcome::Ignored { .. } => "ignored",
            Outcome::RateLimited { .. } => "rate_limited",
            Outcome::Failed { .. } => "failed",
            Outcome::GaveUp { .. } => "gave_up",
        }
    }
}

/// `Outcome` as it crosses between replicas. Every kind that existed before `HandleError`
/// keeps its bytes (a model error is its own kinds, as it always was); a storage failure and
/// an unknown agent are kinds of their own, which a replica of an older release logs as a
/// malformed outcome (its caller then gets the API's timeout).
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireOutcome {
    Replied {
        texts: Vec<String>,
        /// Absent from older replicas: `Origin::Other`.
        #[serde(default, skip_serializing_if = "is_other")]
        origin: Origin,
    },
    Ignored {
        reason: WhyNot,
    },
    RateLimited {
        #[serde(with = "ScopeDef")]
        scope: Scope,
    },
    Unconfigured {
        detail: String,
    },
    Timeout {
        secs: f64,
    },
    ProviderRateLimited {
        retry_after_secs: Option<f64>,
    },
    Upstream {
        detail: String,
    },
    Empty,
    GaveUp {
        reason: String,
    },
    Storage {
        detail: String,
    },
    UnknownAgent {
        agent: AgentId,
    },
}

fn is_other(origin: &Origin) -> bool {
    *origin == Origin::Other
}

impl Outcome {
    /// The outcome as bytes for another replica.
    pub(crate) fn to_wire(&self) -> Vec<u8> {
        let wire = match self {
            Outcome::Replied { texts, origin } => WireOutcome::Replied {
                texts: texts.clone(),
                origin: *origin,
            },
            Outcome::Ignored { reason } => WireOutcome::Ignored { reason: *reason },
            Outcome::RateLimited { scope } => WireOutcome::RateLimited { scope: *scope },
            Outcome::Failed { error } => match error {
                HandleError::Model(error) => match error {
                    ProviderError::Unconfigured(d) => {
                        WireOutcome::Unconfigured { detail: d.clone() }
                    }
                    ProviderError::Timeout(t) => WireOutcome::Timeout {
                        secs: t.as_secs_f64(),
                    },
                    ProviderError::RateLimited { retry_after } => {
                        WireOutcome::ProviderRateLimited {
                            retry_after_secs: retry_after.map(|d| d.as_secs_f64()),
                        }
                    }
                    ProviderError::Upstream(d) => WireOutcome::Upstream { detail: d.clone() },
                    ProviderError::Empty => WireOutcome::Empty,
                },
                HandleError::Storage(d) => WireOutcome::Storage { detail: d.clone() },
                HandleError::UnknownAgent(agent) => WireOutcome::UnknownAgent {
                    agent: agent.clone(),
                },
            },
            Outcome::GaveUp { reason } => WireOutcome::GaveUp {
                reason: reason.clone(),
            },
        };
        // Only strings, numbers and enums: serializing cannot fail.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads an outcome another replica relayed; `None` for bytes that are not one.
    pub(crate) fn from_wire(bytes: &[u8]) -> Option<Outcome> {
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or_default();
        let model = |error: ProviderError| Outcome::Failed {
            error: HandleError::Model(error),
        };
        Some(match serde_json::from_slice(bytes).ok()? {
            WireOutcome::Replied { texts, origin } => Outcome::Replied { texts, origin },
            WireOutcome::Ignored { reason } => Outcome::Ignored { reason },
            WireOutcome::RateLimited { scope } => Outcome::RateLimited { scope },
            WireOutcome::Unconfigured { detail } => model(ProviderError::Unconfigured(detail)),
            WireOutcome::Timeout { secs: s } => model(ProviderError::Timeout(secs(s))),
            WireOutcome::ProviderRateLimited { retry_after_secs } => {
                model(ProviderError::RateLimited {
                    retry_after: retry_after_secs.map(secs),
                })
            }
            WireOutcome::Upstream { detail } => model(ProviderError::Upstream(detail)),
            WireOutcome::Empty => model(ProviderError::Empty),
            WireOutcome::GaveUp { reason } => Outcome::GaveUp { reason },
            WireOutcome::Storage { detail } => Outcome::Failed {
                error: HandleError::Storage(detail),
            },
            WireOutcome::UnknownAgent { agent } => Outcome::Failed {
                error: HandleError::UnknownAgent(agent),
            },
        })
    }
}

/// Carries outcomes to the other replicas, where someone may wait for them.
pub(crate) trait OutcomeRelay: Send + Sync {
    fn announce(&self, id: JournalId, outcome: &Outcome);
}

/// The callers waiting on journal ids, here and (through a relay) on other replicas.
///
/// Waiting is all it tracks. That a message is not handled twice at once does not rest on
/// it: two publications of one entry (a repost of a failed message while the restart
/// replay drives it) share the room's lane on the bus, so the second one starts after the
/// first finished, and then finds the entry done in the journal (`Store::journal_begin`).
#[derive(Clone, Default)]
pub struct Waiters {
    inner: Arc<Mutex<HashMap<JournalId, Vec<oneshot::Sender<Outcome>>>>>,
    /// Set once, by a shared bus: where outcomes go for the other replicas.
    relay: Arc<OnceLock<Arc<dyn OutcomeRelay>>>,
    /// Callers that watch a reply as it is written (`live`).
    live: crate::live::LiveReplies,
    /// Turns a delete of their message cancels (`turns`, issue 32).
    turns: crate::turns::TurnsInFlight,
}

impl Waiters {
    /// The replies callers watch as they are written (an HTTP stream).
    pub fn live(&self) -> &crate::live::LiveReplies {
        &self.live
    }

    /// The turns in flight, for a delete to cancel (issue 32).
    pub fn turns(&self) -> &crate::turns::TurnsInFlight {
        &self.turns
    }

    pub fn wait(&self, id: JournalId) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.lock().entry(id).or_default().push(tx);
        rx
    }

    /// Sends every outcome to the other replicas too, from now on.
    pub(crate) fn relay_to(&self, relay: Arc<dyn OutcomeRelay>) {
        let _ = self.relay.set(relay);
    }

    /// Hands the outcome to everyone waiting on `id`, here and (through the relay) on the
    /// other replicas.
    pub fn complete(&self, id: JournalId, outcome: &Outcome) {
        if let Some(relay) = self.relay.get() {
            relay.announce(id, outcome);
        }
        self.complete_relayed(id, outcome);
    }

    /// Hands an outcome to the callers waiting here, without relaying it further.
    pub(crate) fn complete_relayed(&self, id: JournalId, outcome: &Outcome) {
        let senders = self.lock().remove(&id);
        for tx in senders.into_iter().flatten() {
            let _ = tx.send(outcome.clone());
        }
    }

    /// Whether a caller waits on `id` here (a shared bus then asks for its outcome back).
    pub(crate) fn is_waited(&self, id: JournalId) -> bool {
        self.lock().contains_key(&id)
    }

    /// Forgets a waiter whose caller went away.
    pub fn forget(&self, id: JournalId) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JournalId, Vec<oneshot::Sender<Outcome>>>> {
        self.inner.locked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(outcome: &Outcome) -> String {
        String::from_utf8(outcome.to_wire()).unwrap()
    }

    fn failed(error: ProviderError) -> Outcome {
        Outcome::Failed {
            error: HandleError::Model(error),
        }
    }

    /// The bytes a replica of the release before typed outcomes sent, and reads: a rolling
    /// upgrade mixes both.
    #[test]
    fn the_wire_form_of_every_earlier_kind_is_unchanged() {
        let cases = [
            (
                Outcome::Replied {
                    texts: vec!["hi".into()],
                    origin: Origin::Other,
                },
                r#"{"kind":"replied","texts":["hi"]}"#,
            ),
            (
                Outcome::Ignored {
                    reason: WhyNot::Bot,
                },
                r#"{"kind":"ignored","reason":"message from a bot"}"#,
            ),
            (
                Outcome::Ignored {
                    reason: WhyNot::NotAllowedRoom,
                },
                r#"{"kind":"ignored","reason":"room is not in the persona's allowed list"}"#,
            ),
            (
                Outcome::Ignored {
                    reason: WhyNot::DirectMessagesOff,
                },
                r#"{"kind":"ignored","reason":"the persona ignores direct messages"}"#,
            ),
            (
                Outcome::Ignored {
                    reason: WhyNot::NotAddressed,
                },
                r#"{"kind":"ignored","reason":"not addressed to the persona"}"#,
            ),
            (
                Outcome::RateLimited { scope: Scope::User },
                r#"{"kind":"rate_limited","scope":"user"}"#,
            ),
            (
                Outcome::RateLimited { scope: Scope::Room },
                r#"{"kind":"rate_limited","scope":"room"}"#,
            ),
            (
                Outcome::RateLimited {
                    scope: Scope::Agent,
                },
                r#"{"kind":"rate_limited","scope":"agent"}"#,
            ),
            (
                failed(ProviderError::Unconfigured("set X".into())),
                r#"{"kind":"unconfigured","detail":"set X"}"#,
            ),
            (
                failed(ProviderError::Timeout(Duration::from_millis(1500))),
                r#"{"kind":"timeout","secs":1.5}"#,
            ),
            (
                failed(ProviderError::RateLimited {
                    retry_after: Some(Duration::from_secs(2)),
                }),
                r#"{"kind":"provider_rate_limited","retry_after_secs":2.0}"#,
            ),
            (
                failed(ProviderError::RateLimited { retry_after: None }),
                r#"{"kind":"provider_rate_limited","retry_after_secs":null}"#,
            ),
            (
                failed(ProviderError::Upstream("502".into())),
                r#"{"kind":"upstream","detail":"502"}"#,
            ),
            (failed(ProviderError::Empty), r#"{"kind":"empty"}"#),
            (
                Outcome::GaveUp {
                    reason: "gave up after 5 attempts".into(),
                },
                r#"{"kind":"gave_up","reason":"gave up after 5 attempts"}"#,
            ),
        ];
        for (outcome, bytes) in cases {
            assert_eq!(wire(&outcome), bytes);
            let back = Outcome::from_wire(bytes.as_bytes()).expect("an earlier release's bytes");
            assert_eq!(wire(&back), bytes, "{outcome:?} does not read back");
        }
    }

    #[test]
    fn the_new_kinds_cross_replicas() {
        let storage = Outcome::Failed {
            error: HandleError::Storage("connection refused".into()),
        };
        assert_eq!(
            wire(&storage),
            r#"{"kind":"storage","detail":"connection refused"}"#
        );
        assert!(matches!(
            Outcome::from_wire(&storage.to_wire()),
            Some(Outcome::Failed {
                error: HandleError::Storage(d)
            }) if d == "connection refused"
        ));
        let unknown = Outcome::Failed {
            error: HandleError::UnknownAgent(AgentId::new("ada")),
        };
        assert_eq!(wire(&unknown), r#"{"kind":"unknown_agent","agent":"ada"}"#);
        assert!(matches!(
            Outcome::from_wire(&unknown.to_wire()),
            Some(Outcome::Failed {
                error: HandleError::UnknownAgent(a)
            }) if a.as_str() == "ada"
        ));
    }

    #[test]
    fn what_is_not_an_outcome_reads_as_none() {
        assert!(Outcome::from_wire(b"nonsense").is_none());
        assert!(Outcome::from_wire(br#"{"kind":"ignored","reason":"because"}"#).is_none());
        assert!(Outcome::from_wire(br#"{"kind":"rate_limited","scope":"galaxy"}"#).is_none());
    }

    #[test]
    fn text_forms_match_the_wire() {
        for why in [
            WhyNot::Bot,
            WhyNot::NotAllowedRoom,
            WhyNot::DirectMessagesOff,
            WhyNot::NotAddressed,
            WhyNot::Muted,
            WhyNot::BotTurns,
            WhyNot::OverBudget,
            WhyNot::OtherPersona,
        ] {
            assert_eq!(
                serde_json::to_string(&why).unwrap(),
                format!("\"{}\"", why.as_str())
            );
        }
        assert_eq!(Scope::Room.to_string(), "room");
    }

    #[tokio::test]
    async fn every_waiter_hears_and_a_forgotten_one_does_not() {
        let waiters = Waiters::default();
        let a = waiters.wait(JournalId(1));
        let b = waiters.wait(JournalId(1));
        let c = waiters.wait(JournalId(2));
        waiters.forget(JournalId(2));
        waiters.complete(
            JournalId(1),
            &Outcome::Replied {
                texts: vec![],
                origin: Origin::Other,
            },
        );
        assert!(matches!(a.await, Ok(Outcome::Replied { .. })));
        assert!(matches!(b.await, Ok(Outcome::Replied { .. })));
        assert!(c.await.is_err(), "a forgotten waiter is dropped");
    }
}
