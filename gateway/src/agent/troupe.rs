//! The agent's side of sharing a room with the other personas of the troupe (docs/rooms.md,
//! "A troupe in one room"): who the troupe is on a platform, telling the troupe's own bots
//! apart from other people's, and sharing a Web room's exchange. Whether this persona is the
//! one that answers a message nobody addressed is the decide step's (`arbitrate`).
//!
//! The troupe is every persona this gateway loaded that has a connector on the message's
//! platform; their bots' user ids come from those connectors (`Connector::self_id`). With
//! fewer than two such personas nothing here writes a row or changes a decision.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use troupe_connectors::{AgentId, Inbound, Platform, SELF_ID_KEY, UserId};

use super::{Agent, Agents};
use crate::rooms::arbiter::Member;

/// The troupe, held weakly: the registry holds the agents, and an agent holding the
/// registry strongly would keep every agent alive forever.
pub(super) struct Troupe(Weak<RwLock<HashMap<AgentId, Arc<Agent>>>>);

impl Troupe {
    fn agents(&self) -> Option<Agents> {
        self.0.upgrade().map(|inner| Agents { inner })
    }
}

/// Who wrote a message, as the troupe sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Author {
    /// Another persona of this troupe (its bot's user id is one of the troupe's connectors').
    Troupe,
    /// A person, or a bot that is not one of ours.
    Outsider,
}

impl Agent {
    /// Lets the persona know the rest of the troupe, for rooms they share.
    pub fn with_troupe(mut self, troupe: &Agents) -> Self {
        self.troupe = Some(Troupe(Arc::downgrade(&troupe.inner)));
        self
    }

    /// The troupe on `inbound`'s platform, without the room's controls (`following` false):
    /// enough to recognise its bots. A bot's user id comes from its connector, or, on a
    /// replica that does not run that connector, from what the connector kept in the
    /// database when it started. Empty on the API, and without a troupe.
    pub(super) async fn troupe_on(&self, inbound: &Inbound) -> anyhow::Result<Vec<Member>> {
        let platform = inbound.platform();
        let Some(troupe) = self.troupe.as_ref().and_then(Troupe::agents) else {
            return Ok(Vec::new());
        };
        if platform == Platform::Web {
            return Ok(Vec::new());
        }
        let mut members = Vec::new();
        for agent in troupe.all() {
            let Some(connector) = self.connectors.get(&agent.id, platform) else {
                continue;
            };
            // The stored id is read only where an id can matter: a bot wrote the message,
            // or it mentions someone (`<@id>`); a person's plain message costs no read.
            let ids_matter = inbound.author.is_bot || inbound.text.contains("<@");
            let bot_user = match connector.self_id() {
                Some(id) => Some(id),
                None if !ids_matter => None,
                None => self
                    .store
                    .connector_state_get(&agent.id, platform, SELF_ID_KEY)
                    .await?
                    .map(UserId::new),
            };
            let mind = agent.mind();
            members.push(Member {
                id: agent.id.clone(),
                name: mind.persona.name.clone(),
                topics: mind.persona.character.topics.clone(),
                bot_user,
                following: false,
            });
        }
        Ok(members)
    }

    /// The other persona of the troupe that wrote `inbound`, if one did (its bot's user id
    /// is one of the troupe's connectors'): such a bot is heard even where other people's
    /// bots are ignored, and its messages still count against `TROUPE_BOT_TURNS`. It is
    /// noted as the message's sender, so that a person's reply to it is known as addressed
    /// to it (`rooms::arbiter::addressee`).
    pub(super) async fn author_of(&self, inbound: &Inbound) -> anyhow::Result<Author> {
        if !inbound.author.is_bot {
            return Ok(Author::Outsider);
        }
        let members = self.troupe_on(inbound).await?;
        let Some(sender) = members
            .iter()
            .find(|m| m.id != self.id && m.bot_user.as_ref() == Some(&inbound.author.id))
        else {
            return Ok(Author::Outsider);
        };
        self.store
            .note_sender(&inbound.room.key(), &inbound.id, &sender.id)
            .await?;
        Ok(Author::Troupe)
    }

    /// On the Web platform, where no connector carries one persona's reply to the others,
    /// the other personas present in the room (they have talked there) hear the exchange:
    /// the person's message and this persona's reply join their memory of the room, with
    /// the names, as the troupe's messages do on Discord.
    pub(super) async fn share_in_web_room(
        &self,
        journal_id: crate::storage::JournalId,
        inbound: &Inbound,
        reply: &str,
    ) -> anyhow::Result<()> {
        let Some(troupe) = self.troupe.as_ref().and_then(Troupe::agents) else {
            return Ok(());
        };
        if inbound.platform() != Platform::Web {
            return Ok(());
        }
        let name = self.mind().persona.name.clone();
        let room = inbound.room.key();
        let lines = [
            crate::storage::NewMemory {
                author_id: inbound.author.id.as_str(),
                author_name: &inbound.author.name,
                text: &inbound.text,
                from_agent: false,
                created_at_ms: inbound.sent_at_ms,
            },
            crate::storage::NewMemory {
                author_id: self.id.as_str(),
                author_name: &name,
                text: reply,
                from_agent: false,
                created_at_ms: crate::clock::now_ms(),
            },
        ];
        for other in troupe.all().into_iter().filter(|a| a.id != self.id) {
            self.store
                .overhear(&other.id, &room, journal_id, &lines)
                .await?;
        }
        Ok(())
    }
}
