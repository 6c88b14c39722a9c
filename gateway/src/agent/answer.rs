//! Answer and record: the reply's room action (`act`), then the exchange recorded in one
//! transaction with the reply's outbox entry (`record`), and the reply handed to the outbox
//! (`reply`). A message that gets no reply is recorded the same way, without one.

use troupe_connectors::{Inbound, Platform};

use super::Agent;
use super::decide::Standing;
use super::outbound::Kind;
use super::tools::Answer;
use super::turn::{Step, Turn};
use crate::outcome::Outcome;
use crate::rooms::actions::Quoted;
use crate::storage::{HandledMessage, NewMemory, RecordedReply, ReplyStart, Speaker};

/// The model's reply, with what `act` needs to judge the action it may propose.
pub(super) struct Reply {
    pub(super) text: String,
    pub(super) standing: Standing,
    pub(super) quoted: Quoted,
    /// Who wrote it and what it cost, for the caller's outcome.
    pub(super) origin: crate::outcome::Origin,
}

impl Reply {
    /// What the model answered, judged by the sender's `standing` and by whether the prompt
    /// `quoted` a room-control marker.
    pub(super) fn new(answer: Answer, standing: Standing, quoted: Quoted) -> Reply {
        Reply {
            text: answer.text,
            standing,
            // A marker in a tool's result is data: the reply cannot act on its echo.
            quoted: if answer.tool_marker {
                Quoted::Marker
            } else {
                quoted
            },
            origin: answer.origin,
        }
    }
}

impl Agent {
    /// Reply: records the exchange and delivers the reply (`reply`), then lets room memory
    /// learn from it in the background.
    pub(super) async fn answer(
        &self,
        turn: &Turn<'_>,
        reply: Reply,
        recalled_messages: usize,
    ) -> Step<Outcome> {
        let (mind, inbound) = (&turn.mind, turn.inbound());
        let origin = reply.origin;
        let Some(text) = self.act(inbound, reply).await? else {
            // A muted room stays quiet unless the reply unmutes it.
            self.record(turn, None).await?;
            return Ok(Outcome::Ignored {
                reason: crate::outcome::WhyNot::Muted,
            });
        };
        // A voice note is answered by voice too, before the text (`speak`).
        self.speak(turn, &text).await;
        self.reply(turn, text.clone()).await?;
        self.share_in_web_room(turn.journal, inbound, &text).await?;
        if inbound.platform() != Platform::Web {
            // The persona's own reply is a bot message in the room too.
            self.store
                .bump_bot_streak(&self.id, &inbound.room.key(), Speaker::Bot)
                .await?;
        }
        let model = crate::memory::Model {
            provider: mind.background(),
            agent_name: mind.persona.name.clone(),
            meter: turn.meter.clone(),
        };
        self.memory.after_reply(model, inbound, recalled_messages);
        Ok(Outcome::Replied {
            texts: vec![text],
            origin,
        })
    }

    /// Honours the action the reply ends with (`rooms::actions`: "please stop talking
    /// here" mutes the room) and returns the reply without it. Only the current speaker's
    /// standing acts: the action must be one their own message asks for, the prompt must
    /// quote no marker (`actions::honoured`), and they must be allowed to steer the room,
    /// else they get the polite refusal instead of the acknowledgement. An action not
    /// honoured is dropped silently, with the rest of the reply sent as written. `None`:
    /// the room is muted and the reply does not unmute it, so nothing is said, not even a
    /// refusal.
    pub(super) async fn act(
        &self,
        inbound: &Inbound,
        reply: Reply,
    ) -> anyhow::Result<Option<String>> {
        use crate::rooms::actions::{self, Action};
        use crate::storage::RoomControl;
        let Reply {
            text: reply,
            standing,
            quoted,
            ..
        } = reply;
        let (text, proposed) = actions::take(&reply);
        let action = actions::honoured(proposed, &inbound.text, quoted);
        let Some(action) = action else {
            if let Some(proposed) = proposed {
                tracing::info!(
                    ?proposed,
                    ?quoted,
                    "the reply proposed a room action the speaker did not ask for; not honoured"
                );
            }
            return Ok((!standing.muted).then(|| actions::strip(&reply)));
        };
        let may_steer = match standing.may_steer {
            Some(known) => known,
            None => self.may_steer(inbound).await,
        };
        if standing.muted && !(may_steer && action == Action::Unmute) {
            return Ok(None);
        }
        if !may_steer {
            return Ok(Some(
                crate::rooms::not_allowed(inbound.platform()).to_string(),
            ));
        }
        let control = match action {
            Action::Mute => RoomControl::Mute(Some(i64::MAX)),
            Action::Unmute => RoomControl::Mute(None),
        };
        tracing::info!(?action, "the reply asked for a room action");
        let by = format!("{}:{}", inbound.platform(), inbound.author.id);
        self.store
            .set_room_control(&self.id, &inbound.room.key(), control, &by)
            .await?;
        Ok(Some(text))
    }

    /// Records the exchange and the reply, then delivers it.
    pub(super) async fn reply(&self, turn: &Turn<'_>, text: String) -> anyhow::Result<()> {
        let inbound = turn.inbound();
        match self.record(turn, Some(text)).await? {
            Some(RecordedReply::Claimed(entry)) => self.outbox.deliver_claimed(entry).await?,
            Some(RecordedReply::Delivered(outbox_id)) => {
                self.outbox.delivered_in_band(inbound.platform(), outbox_id);
                return Ok(());
            }
            Some(RecordedReply::Queued(outbox_id)) => self.outbox.deliver(outbox_id).await?,
            None => return Ok(()),
        };
        Ok(())
    }

    /// Commits the message to room memory, with the reply and its outbox entry when there
    /// is one, and closes the journal entry: one transaction.
    pub(super) async fn record(
        &self,
        turn: &Turn<'_>,
        reply: Option<String>,
    ) -> anyhow::Result<Option<RecordedReply>> {
        let (journal_id, inbound) = (turn.journal, turn.inbound());
        let agent_name = &turn.mind.persona.name;
        let room = inbound.room.key();
        let outbound = reply.map(|text| self.outbound(inbound, Kind::Reply(journal_id), text));
        // An image is remembered as a short line, never its bytes (media.rs).
        let remembered = crate::media::remembered(inbound);
        let handled = HandledMessage {
            journal_id,
            agent_id: &self.id,
            room: &room,
            room_name: inbound.room.name.as_deref(),
            inbound: NewMemory {
                author_id: inbound.author.id.as_str(),
                author_name: &inbound.author.name,
                text: &remembered,
                from_agent: false,
                created_at_ms: inbound.sent_at_ms,
            },
            reply: outbound.as_ref().map(|o| {
                (
                    NewMemory {
                        author_id: self.id.as_str(),
                        author_name: agent_name,
                        text: &o.text,
                        from_agent: true,
                        created_at_ms: crate::clock::now_ms(),
                    },
                    o.clone(),
                )
            }),
        };
        let start = outbound
            .as_ref()
            .map_or(ReplyStart::Pending, |o| self.outbox.start(&self.id, o));
        Ok(self.store.record_handled_as(handled, &start).await?)
    }
}
