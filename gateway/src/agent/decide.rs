//! Whether the persona answers a message: the rules, and the agent's step that applies them.
//!
//! The rules, in order:
//! 1. Other bots are ignored when the persona says so (the default), which prevents two bots
//!    from talking to each other forever.
//! 2. The HTTP API and the CLI are direct conversations: always answered.
//! 3. A room outside `allowedChannelIds`/`allowedGroupIds` is ignored.
//! 4. A direct message is answered, unless the persona ignores DMs.
//! 5. An @mention, or a reply to one of the persona's messages, is answered.
//! 6. The persona's name in the text is answered, unless it answers mentions only.
//! 7. Anything else in a group is left alone: the persona joins in when addressed.
//!
//! Then the room's controls, set by chat commands (`steer`): a muted room is not answered
//! (commands are, before this), and a followed room is answered when not addressed.
//!
//! The rules and `steer` are pure, so every rule is a unit test. Below them is the agent's
//! decide step (`Agent::decide`), the one place that reads the room and applies them: the
//! room's controls (with its recent messages, in the same read, when the rules answer),
//! then the bot-turn cap (`bot_turns`), then the troupe's arbiter (`agent::troupe`); and
//! `standing`, what the sender may do to a muted room.

use troupe_connectors::{Inbound, Platform};

use super::Agent;
use super::troupe::Author;
use super::turn::{Step, Turn, done};
use crate::outcome::Outcome;
use crate::persona::ClientSwitches;
use crate::rooms::names_in;
use crate::storage::{RoomContext, RoomReads, RoomState, Speaker};

// Why not: an outcome's vocabulary, so it lives with `Outcome` (below the agent and the
// bus); the rules that choose one are here.
pub use crate::outcome::WhyNot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Respond(Why),
    Ignore(WhyNot),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Direct,
    Mention,
    ReplyToSelf,
    Name,
    /// The room is followed (`/follow`): every message is answered.
    Following,
}

/// Applies the room's controls to `decision`: muted (at `now_ms`) silences any answer, and
/// following answers what was left alone only for not being addressed (a bot, a room not
/// allowed, DMs off stay ignored).
///
/// One message still reaches a muted persona: one addressed to it that asks it to talk
/// again (its `text`, see `rooms::actions::asks_to_talk_again`), so that "you can talk
/// again" works like `/unmute` with the one model call that answers it. Only someone who
/// may steer the room gets that call (`Agent::standing`), and its reply is sent only if it
/// unmutes the room (`Agent::act`).
pub fn steer(decision: Decision, room: &RoomState, now_ms: i64, text: &str) -> Decision {
    match decision {
        Decision::Respond(_)
            if room.muted_at(now_ms) && !crate::rooms::actions::asks_to_talk_again(text) =>
        {
            Decision::Ignore(WhyNot::Muted)
        }
        Decision::Ignore(WhyNot::NotAddressed) if room.following && !room.muted_at(now_ms) => {
            Decision::Respond(Why::Following)
        }
        d => d,
    }
}

/// Decides for `message`, given the persona's names and its switches for the platform.
pub fn decide(names: &[&str], switches: &ClientSwitches, message: &Inbound) -> Decision {
    if message.author.is_bot && switches.ignore_bot_messages {
        return Decision::Ignore(WhyNot::Bot);
    }
    if message.platform() == Platform::Web {
        return Decision::Respond(Why::Direct);
    }
    if let Some(allowed) = &switches.allowed_rooms
        && !message.is_direct
        && !allowed.iter().any(|r| {
            // The platform's own id: a room of one of several bots is tagged (issue 46).
            let untagged = |id: &str| troupe_connectors::accounts::split(id).1.to_string();
            *r == untagged(message.room.id.as_str())
                || Some(r.clone()) == message.room.send_to.as_deref().map(untagged)
        })
    {
        return Decision::Ignore(WhyNot::NotAllowedRoom);
    }
    if message.is_direct {
        return if switches.ignore_direct_messages {
            Decision::Ignore(WhyNot::DirectMessagesOff)
        } else {
            Decision::Respond(Why::Direct)
        };
    }
    if message.mentions_self {
        return Decision::Respond(Why::Mention);
    }
    if message.reply_to.as_ref().is_some_and(|r| r.to_self) {
        return Decision::Respond(Why::ReplyToSelf);
    }
    if !switches.respond_only_to_mentions && names.iter().any(|n| names_in(&message.text, n)) {
        return Decision::Respond(Why::Name);
    }
    Decision::Ignore(WhyNot::NotAddressed)
}

// The agent's decide step: reads the room, then applies the rules above.

/// What the message's sender may do to its room, as far as `standing` knows before the
/// model is called (rooms::actions, issue 30 finding 5).
#[derive(Debug, Clone, Copy)]
pub(super) struct Standing {
    /// The room was muted when the message was decided: nothing is said in it unless the
    /// reply unmutes it.
    pub(super) muted: bool,
    /// Whether the sender may steer the room, when it was asked already.
    pub(super) may_steer: Option<bool>,
}

impl Agent {
    /// Decide: whether the persona answers at all (`decide::decide`), then the room's
    /// controls (`decide::steer`: muted, following). An ignored message is still remembered
    /// in its room, and ends the turn. When it answers, what was read of the room. A
    /// message the rules answer has its room's messages (and summary) read with the
    /// controls, in one round trip; one they ignore reads the controls alone.
    pub(super) async fn decide(&self, turn: &Turn<'_>) -> Step<RoomContext> {
        let (persona, inbound) = (&turn.mind.persona, turn.inbound());
        let mut switches = persona.switches(inbound.platform());
        // The troupe's own personas are heard where other people's bots are not.
        let author = self.author_of(inbound).await?;
        switches.ignore_bot_messages &= author != Author::Troupe;
        let names: Vec<&str> = [persona.name.as_str()].into_iter().collect();
        let first = decide(&names, &switches, inbound);
        let room_key = inbound.room.key();
        let limit = i64::from(self.settings.history_limit);
        let reads = match first {
            Decision::Respond(_) if self.memory.wants_summary(&room_key) => {
                RoomReads::WindowAndSummary { limit }
            }
            Decision::Respond(_) => RoomReads::Window { limit },
            _ => RoomReads::Controls,
        };
        let room = self.store.room_context(&self.id, &room_key, reads).await?;
        let state = &room.state;
        let decision = steer(first, state, crate::clock::now_ms(), &inbound.text);
        let decision = self.bot_turns(decision, inbound).await?;
        let decision = self.arbitrate(decision, inbound, author).await?;
        match decision {
            Decision::Ignore(why) => {
                tracing::debug!(reason = why.as_str(), "not answering");
                self.record(turn, None).await?;
                done(Outcome::Ignored { reason: why })
            }
            Decision::Respond(why) => {
                tracing::debug!(?why, "answering");
                Ok(room)
            }
        }
    }

    /// Standing: what the sender may do to the room. A muted room lets through only a
    /// message asking to talk again (`decide::steer`); from someone who may not steer the
    /// room it ends here, with no model call and, as in any muted room, nothing said.
    pub(super) async fn standing(&self, turn: &Turn<'_>, room: &RoomContext) -> Step<Standing> {
        if !room.state.muted_at(crate::clock::now_ms()) {
            return Ok(Standing {
                muted: false,
                may_steer: None,
            });
        }
        if self.may_steer(turn.inbound()).await {
            return Ok(Standing {
                muted: true,
                may_steer: Some(true),
            });
        }
        tracing::info!("asked to talk again by someone who may not steer the room; staying quiet");
        self.record(turn, None).await?;
        done(Outcome::Ignored {
            reason: crate::outcome::WhyNot::Muted,
        })
    }

    /// The cap on bot conversations (`TROUPE_BOT_TURNS`): a bot's message counts one more in
    /// the room's streak of bot messages, a human's ends it, and past the cap no bot is
    /// answered, whatever addresses the persona (a reply-ping included), until a human
    /// speaks. Bots the persona ignores anyway cost nothing; the API has no other bots.
    pub(super) async fn bot_turns(
        &self,
        decision: Decision,
        inbound: &Inbound,
    ) -> anyhow::Result<Decision> {
        if inbound.platform() == Platform::Web || decision == Decision::Ignore(WhyNot::Bot) {
            return Ok(decision);
        }
        let room = inbound.room.key();
        let streak = self
            .store
            .bump_bot_streak(
                &self.id,
                &room,
                if inbound.author.is_bot {
                    Speaker::Bot
                } else {
                    Speaker::Person
                },
            )
            .await?;
        let over = inbound.author.is_bot && streak > i64::from(self.settings.bot_turns);
        Ok(match decision {
            Decision::Respond(_) if over => {
                tracing::info!(streak, "bot turns used up; silent until a human speaks");
                Decision::Ignore(WhyNot::BotTurns)
            }
            d => d,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::tests::msg;
    use troupe_connectors::{MessageId, ReplyTo};

    fn defaults() -> ClientSwitches {
        ClientSwitches {
            ignore_bot_messages: true,
            ..Default::default()
        }
    }

    #[test]
    fn group_chatter_is_left_alone() {
        let d = decide(
            &["Eliza"],
            &defaults(),
            &msg(Platform::Discord, "what a day"),
        );
        assert_eq!(d, Decision::Ignore(WhyNot::NotAddressed));
    }

    #[test]
    fn the_name_as_a_word_counts() {
        let s = defaults();
        assert_eq!(
            decide(
                &["Eliza"],
                &s,
                &msg(Platform::Discord, "hey eliza, thoughts?")
            ),
            Decision::Respond(Why::Name)
        );
        assert_eq!(
            decide(&["Eliza"], &s, &msg(Platform::Discord, "elizabeth is here")),
            Decision::Ignore(WhyNot::NotAddressed)
        );
    }

    #[test]
    fn mention_only_mode_ignores_the_name_but_not_mentions_or_replies() {
        let s = ClientSwitches {
            respond_only_to_mentions: true,
            ..defaults()
        };
        assert_eq!(
            decide(&["Eliza"], &s, &msg(Platform::Telegram, "eliza?")),
            Decision::Ignore(WhyNot::NotAddressed)
        );
        let mut m = msg(Platform::Telegram, "hi");
        m.mentions_self = true;
        assert_eq!(decide(&["Eliza"], &s, &m), Decision::Respond(Why::Mention));
        let mut r = msg(Platform::Telegram, "hi");
        r.reply_to = Some(ReplyTo {
            message: MessageId::new("0"),
            to_self: true,
        });
        assert_eq!(
            decide(&["Eliza"], &s, &r),
            Decision::Respond(Why::ReplyToSelf)
        );
    }

    #[test]
    fn bots_are_ignored_even_when_they_mention() {
        let mut m = msg(Platform::Discord, "@Eliza hi");
        m.mentions_self = true;
        m.author.is_bot = true;
        assert_eq!(
            decide(&["Eliza"], &defaults(), &m),
            Decision::Ignore(WhyNot::Bot)
        );
    }

    #[test]
    fn direct_messages_and_the_api() {
        let mut dm = msg(Platform::Discord, "hello");
        dm.is_direct = true;
        assert_eq!(
            decide(&["Eliza"], &defaults(), &dm),
            Decision::Respond(Why::Direct)
        );
        let off = ClientSwitches {
            ignore_direct_messages: true,
            ..defaults()
        };
        assert_eq!(
            decide(&["Eliza"], &off, &dm),
            Decision::Ignore(WhyNot::DirectMessagesOff)
        );
        assert_eq!(
            decide(&["Eliza"], &defaults(), &msg(Platform::Web, "anything")),
            Decision::Respond(Why::Direct)
        );
    }

    #[test]
    fn muted_rooms_are_silent_and_followed_rooms_join_in() {
        let muted = RoomState {
            muted_until_ms: Some(100),
            ..Default::default()
        };
        let direct = Decision::Respond(Why::Direct);
        assert_eq!(
            steer(direct, &muted, 99, "good morning"),
            Decision::Ignore(WhyNot::Muted)
        );
        assert_eq!(steer(direct, &muted, 100, "good morning"), direct);
        // Asked to talk again, an addressed message gets through to be answered (and to
        // unmute); an unaddressed one does not, even in a followed room.
        assert_eq!(steer(direct, &muted, 99, "you can talk again"), direct);
        let muted_following = RoomState {
            following: true,
            ..muted.clone()
        };
        assert_eq!(
            steer(
                Decision::Ignore(WhyNot::NotAddressed),
                &muted_following,
                99,
                "you can talk again"
            ),
            Decision::Ignore(WhyNot::NotAddressed)
        );
        let following = RoomState {
            following: true,
            ..Default::default()
        };
        let unaddressed = Decision::Ignore(WhyNot::NotAddressed);
        assert_eq!(
            steer(unaddressed, &following, 0, "good morning"),
            Decision::Respond(Why::Following)
        );
        assert_eq!(
            steer(Decision::Ignore(WhyNot::Bot), &following, 0, "good morning"),
            Decision::Ignore(WhyNot::Bot)
        );
        assert_eq!(
            steer(unaddressed, &RoomState::default(), 0, "good morning"),
            unaddressed
        );
    }

    #[test]
    fn allowed_rooms_filter_groups() {
        let s = ClientSwitches {
            allowed_rooms: Some(vec!["other".into()]),
            ..defaults()
        };
        let mut m = msg(Platform::Discord, "eliza");
        m.mentions_self = true;
        assert_eq!(
            decide(&["Eliza"], &s, &m),
            Decision::Ignore(WhyNot::NotAllowedRoom)
        );
    }
}
