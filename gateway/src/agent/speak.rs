//! Voice out in a turn (issue 32, `media::speech`): a message that came in as a voice note,
//! for a persona with a voice, is answered with a voice note before its text. Best effort:
//! a speech or send failure is logged and the text goes out as without it.
//!
//! The voice note is not journaled: a gateway stopped between the voice note and the
//! reply's record says it again when the message is driven again (the text still goes once).

use troupe_connectors::VoiceNote;

use super::Agent;
use super::turn::Turn;
use crate::media::speech::{self, Speaking};
use crate::provider::{Parts, Payer, ProviderError, Request, Spoken};
use crate::spend::{Priority, Purpose, Who};

impl Agent {
    /// Says `text` in the room as a voice note when the message came as one and the
    /// persona speaks; nothing otherwise (one check for a persona without a voice). The
    /// speech is one model call, metered as `speech`.
    pub(super) async fn speak(&self, turn: &Turn<'_>, text: &str) {
        let (mind, inbound) = (&turn.mind, turn.inbound());
        let Some(speaking) = &mind.speaking else {
            return;
        };
        if !speech::came_as_voice(inbound) {
            return;
        }
        let Some(connector) = self.connector(inbound.platform()) else {
            return;
        };
        let Some(spoken) = self.speech(turn, speaking, text).await else {
            return;
        };
        let note = VoiceNote {
            room: inbound.room.clone(),
            reply_to: Some(inbound.id.clone()),
            audio: spoken.audio,
            duration: spoken.duration,
        };
        match connector.send_voice(&note).await {
            Ok(Some(id)) => tracing::info!(message = %id, "answered the voice note by voice"),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "the voice note could not be sent; the text is sent")
            }
        }
    }

    /// `text` said in the persona's voice: one model call, metered as `speech`; `None`
    /// (logged) when it failed.
    async fn speech(&self, turn: &Turn<'_>, speaking: &Speaking, text: &str) -> Option<Spoken> {
        let inbound = turn.inbound();
        let room = inbound.room.key();
        let request = Request {
            purpose: Purpose::Speech,
            parts: Parts::Speech {
                model: &speaking.model,
                voice: &speaking.voice,
                text,
                cap: self.settings.media.max_bytes,
            },
            tools: None,
            live: None,
            notice: None,
            payer: Payer {
                turn: crate::spend::Turn::new(Priority::Reply, &room),
                meter: turn.meter.as_ref(),
                who: Who::sender(&room, inbound),
            },
        };
        let why = match turn.mind.provider.call(request).await {
            Ok(reply) => return reply.audio,
            Err(ProviderError::Upstream(why)) => why,
            Err(other) => other.to_string(),
        };
        tracing::warn!(model = %speaking.model, "no voice note for the reply: {why}; the text is sent");
        None
    }
}
