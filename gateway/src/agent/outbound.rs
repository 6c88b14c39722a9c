//! One outbound message to the room a message came from, and its outbox key.
//!
//! Everything the agent says to a room answers one message (`reply_to`), in that message's
//! room: its reply, a command's answer, the give-up apology, the model-down notice. The key
//! is what makes a delivery idempotent (the outbox's unique key, the platform's dedupe id),
//! so it is made here, in one place, from what the message is and what is said about it.
//!
//! A reply shown while it is written (`streaming.rs`) is this same outbound, keyed as the
//! reply, so that the reply's delivery finishes the messages shown.

use troupe_connectors::{AgentId, Inbound, Outbound};

use super::Agent;
use crate::storage::JournalId;

/// What an outbound message is to the message it answers; it makes the outbox key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The message's one reply (the model's answer, a command's, a limit's notice):
    /// `{agent}:{journal}`.
    Reply(JournalId),
    /// The apology for a message given up: `{agent}:{journal}:gave-up`.
    GaveUp(JournalId),
    /// The notice that the model is unreachable: `{agent}:model-down:{message}`. Sent
    /// straight to the connector, never recorded, so keyed by the platform's message id.
    ModelDown,
}

/// The outbox key of what `agent` says, as `kind`, about `inbound`.
fn outbox_key(agent: &AgentId, inbound: &Inbound, kind: Kind) -> String {
    match kind {
        Kind::Reply(journal_id) => format!("{agent}:{}", journal_id.0),
        Kind::GaveUp(journal_id) => format!("{agent}:{}:gave-up", journal_id.0),
        Kind::ModelDown => format!("{agent}:model-down:{}", inbound.id),
    }
}

impl Agent {
    /// `text`, said as `kind` in reply to `inbound`, in its room.
    pub(super) fn outbound(&self, inbound: &Inbound, kind: Kind, text: String) -> Outbound {
        Outbound {
            key: outbox_key(&self.id, inbound, kind),
            room: inbound.room.clone(),
            text,
            // An edit is answered as its message: the reply threads to the message itself.
            reply_to: Some(
                inbound
                    .revises
                    .as_ref()
                    .map_or(&inbound.id, |r| &r.of)
                    .clone(),
            ),
            // The re-run of an edited question puts its answer in the earlier reply's
            // messages.
            replaces: match kind {
                Kind::Reply(_) => inbound
                    .revises
                    .as_ref()
                    .map(|r| r.reply.clone())
                    .unwrap_or_default(),
                _ => Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::tests::msg;
    use troupe_connectors::Platform;

    /// The keys are the ones stored outboxes already hold: changing one would send a
    /// reply recorded before an upgrade a second time.
    #[test]
    fn the_outbox_keys_keep_their_shape() {
        let agent = AgentId::from("eliza");
        let inbound = msg(Platform::Telegram, "hi");
        let journal = JournalId(42);
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::Reply(journal)),
            "eliza:42"
        );
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::GaveUp(journal)),
            "eliza:42:gave-up"
        );
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::ModelDown),
            format!("eliza:model-down:{}", inbound.id)
        );
    }
}
