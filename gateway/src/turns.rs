//! The turns in flight that a delete may cancel (issue 32): a question deleted while its
//! reply is being made stops the model call, and no reply is posted.
//!
//! A turn registers its message here for the length of its model call; the ingress, when
//! it journals a delete of that message, cancels it. The room's order on the bus puts the
//! delete after the turn, so it could not reach the turn otherwise. In this process only:
//! on a shared bus the turn may run on another replica, and the delete then takes the
//! reply back once it is posted. Only platforms that send deletes (Discord) register, so
//! a message elsewhere costs nothing here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use troupe_connectors::sync::Locked;
use troupe_connectors::{AgentId, Inbound, MessageId, Platform, RoomKey};

type Key = (AgentId, RoomKey, MessageId);

/// A cheap-to-clone handle on the turns in flight.
#[derive(Clone, Default)]
pub struct TurnsInFlight {
    inner: Arc<Mutex<HashMap<Key, CancellationToken>>>,
}

/// A registered turn; dropping it unregisters it.
pub struct Turn {
    turns: TurnsInFlight,
    key: Key,
    token: CancellationToken,
}

impl Turn {
    /// Resolves when the turn's message was deleted.
    pub async fn deleted(&self) {
        self.token.cancelled().await
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.inner.locked().remove(&self.key);
    }
}

impl TurnsInFlight {
    /// Registers `agent`'s turn on `inbound`, when its platform sends deletes.
    pub fn start(&self, agent: &AgentId, inbound: &Inbound) -> Option<Turn> {
        if inbound.platform() != Platform::Discord || inbound.revises.is_some() {
            return None;
        }
        let key = (agent.clone(), inbound.room.key(), inbound.id.clone());
        let token = CancellationToken::new();
        self.inner.locked().insert(key.clone(), token.clone());
        Some(Turn {
            turns: self.clone(),
            key,
            token,
        })
    }

    /// The message `of` in `room` was deleted: cancels `agent`'s turn on it, if one runs.
    pub fn cancel(&self, agent: &AgentId, room: &RoomKey, of: &MessageId) -> bool {
        let key = (agent.clone(), room.clone(), of.clone());
        match self.inner.locked().get(&key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_connectors::{RoomId, RoomRef, UserId, UserRef};

    fn message(platform: Platform) -> Inbound {
        Inbound {
            id: MessageId::new("7"),
            room: RoomRef::new(platform, RoomId::new("41")),
            author: UserRef {
                id: UserId::new("5"),
                name: "Ann".into(),
                is_bot: false,
                username: None,
            },
            text: "hi".into(),
            attachments: Vec::new(),
            reply_to: None,
            is_direct: false,
            mentions_self: true,
            sent_at_ms: 0,
            client: None,
            revises: None,
        }
    }

    #[tokio::test]
    async fn a_delete_cancels_the_turn_on_its_message_only_while_it_runs() {
        let turns = TurnsInFlight::default();
        let agent = AgentId::new("dot");
        let m = message(Platform::Discord);
        let turn = turns.start(&agent, &m).expect("Discord registers");
        assert!(!turns.cancel(&agent, &m.room.key(), &MessageId::new("8")));
        assert!(turns.cancel(&agent, &m.room.key(), &m.id));
        turn.deleted().await;
        drop(turn);
        assert!(!turns.cancel(&agent, &m.room.key(), &m.id), "unregistered");
        assert!(turns.start(&agent, &message(Platform::Telegram)).is_none());
    }
}
