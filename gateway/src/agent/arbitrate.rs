//! The troupe's part of the decide step, in a room several personas share (docs/rooms.md,
//! "A troupe in one room"): whether this persona is the one that answers.
//!
//! The rule itself is pure and lives in `rooms::arbiter` (`addressee`, `choose`); this file
//! does the reading and the writing around it, in the order a decision needs them: the
//! troupe on the platform (no read unless an id matters), the personas' room states in one
//! read, the room's floor and the replied-to sender in one read, then the claim that makes
//! every persona on every replica agree. A room with fewer than two personas reads nothing.

use troupe_connectors::Inbound;

use super::Agent;
use super::decide::{Decision, Why, WhyNot};
use super::troupe::Author;
use crate::rooms::arbiter::{Ground, Member, choose};

impl Agent {
    /// The arbiter's part of the decision. A person addressing this persona makes it the
    /// room's last addressed and claims the message for it. A message answered only because
    /// the room is followed goes to the arbiter's choice, one persona for the whole troupe;
    /// a troupe persona's own message is answered by another only when it addresses it, so
    /// that following personas do not chat among themselves.
    pub(super) async fn arbitrate(
        &self,
        decision: Decision,
        inbound: &Inbound,
        author: Author,
    ) -> anyhow::Result<Decision> {
        let addressed = matches!(
            decision,
            Decision::Respond(Why::Mention | Why::ReplyToSelf | Why::Name)
        );
        if !addressed && decision != Decision::Respond(Why::Following) {
            return Ok(decision);
        }
        let mut members = self.troupe_on(inbound).await?;
        if members.len() < 2 {
            return Ok(decision);
        }
        let room = inbound.room.key();
        if addressed {
            if !inbound.author.is_bot {
                self.store.set_last_addressed(&room, &self.id).await?;
                self.store
                    .claim_message(&room, &inbound.id, &self.id)
                    .await?;
            }
            return Ok(decision);
        }
        if author == Author::Troupe {
            return Ok(Decision::Ignore(WhyNot::NotAddressed));
        }
        let now = crate::clock::now_ms();
        let ids: Vec<_> = members.iter().map(|m| m.id.clone()).collect();
        let states = self.store.room_states_of(&room, &ids).await?;
        for (m, state) in members.iter_mut().zip(states) {
            m.following = state.following && !state.muted_at(now);
        }
        Ok(if self.settle(inbound, &members).await? {
            decision
        } else {
            tracing::info!("another persona of the troupe answers this message");
            Decision::Ignore(WhyNot::OtherPersona)
        })
    }

    /// Whether this persona answers `message`, an unaddressed one in a room it follows: the
    /// stored choice for the message, or this call's choice stored now. A message given in
    /// turn moves the room's turn on, once.
    async fn settle(&self, message: &Inbound, members: &[Member]) -> anyhow::Result<bool> {
        let room = message.room.key();
        let replied_to = match &message.reply_to {
            Some(r) if !r.to_self => Some(&r.message),
            _ => None,
        };
        let (floor, replied_to) = self.store.floor_and_sender(&room, replied_to).await?;
        let Some((choice, ground)) = choose(members, message, &floor, replied_to.as_ref()) else {
            return Ok(false);
        };
        let (winner, stored) = self.store.claim_message(&room, &message.id, choice).await?;
        if stored && ground == Ground::InTurn {
            self.store.advance_turn(&room).await?;
        }
        tracing::debug!(chosen = %winner, ?ground, "the room's arbiter chose");
        Ok(winner == self.id)
    }
}
