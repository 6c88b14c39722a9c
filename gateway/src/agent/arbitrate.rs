//! The troupe's part of the decide step, in a room several personas share (docs/rooms.md,
//! "A troupe in one room"): whether this persona is the one that answers.
//!
//! The rule itself is pure and lives in `rooms::arbiter` (`addressee`, `choose`); this file
//! does the reading and the writing around it, in the order a decision needs them: the
//! troupe on the platform (no read unless an id matters), the personas' room states in one
//! read, the room's floor and the replied-to sender in one read, then the claim that makes
//! every persona on every replica agree. A room with fewer than two personas reads nothing.
//!
//! Personas that share one bot (issue 46, docs/discord.md and docs/telegram.md "A troupe on
//! one bot") share its mention and its direct messages too: `@bot` alone, or a DM to the
//! bot, singles out none of them, so the arbiter picks one among them, as it picks one of
//! the following personas for an unaddressed message. A reply to one's message, or its
//! name, still addresses that one.

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
        let direct = decision == Decision::Respond(Why::Direct);
        if !addressed && !direct && decision != Decision::Respond(Why::Following) {
            return Ok(decision);
        }
        // A DM to a bot of one's own is its own, and needs no look at the room's troupe (a
        // store round trip for every DM otherwise).
        if direct && !self.mind().persona.shares_bot_on(inbound.room.platform) {
            return Ok(decision);
        }
        let mut members = self.troupe_on(inbound).await?;
        if members.len() < 2 {
            return Ok(decision);
        }
        let room = inbound.room.key();
        let shared_bot = self.shared_bot(&members);
        let shared_mention = matches!(decision, Decision::Respond(Why::Mention | Why::Direct))
            && shared_bot.is_some()
            && !self.singled_out(inbound);
        // A DM to a bot of one's own is its own; on a shared bot, one that singles this
        // persona out (its name, a reply to its message) addresses it.
        if direct && shared_bot.is_none() {
            return Ok(decision);
        }
        if (addressed || direct) && !shared_mention {
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
            // For a mention of a shared bot, every persona on that bot may be picked.
            let candidate = match (&shared_bot, shared_mention) {
                (Some(bot), true) => m.bot_user.as_ref() == Some(bot),
                _ => state.following,
            };
            m.following = candidate && !state.muted_at(now);
        }
        Ok(if self.settle(inbound, &members).await? {
            decision
        } else {
            tracing::info!("another persona of the troupe answers this message");
            Decision::Ignore(WhyNot::OtherPersona)
        })
    }

    /// This persona's bot user, when another persona of `members` shares it (both speak
    /// through its webhooks).
    fn shared_bot(&self, members: &[Member]) -> Option<troupe_connectors::UserId> {
        let mine = members.iter().find(|m| m.id == self.id)?.bot_user.clone()?;
        let sharing = members
            .iter()
            .filter(|m| m.bot_user.as_ref() == Some(&mine))
            .count();
        (sharing > 1).then_some(mine)
    }

    /// Whether `message` addresses this persona itself: its name, or a reply to its message.
    fn singled_out(&self, message: &Inbound) -> bool {
        message.reply_to.as_ref().is_some_and(|r| r.to_self)
            || crate::rooms::names_in(&message.text, &self.mind().persona.name)
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
