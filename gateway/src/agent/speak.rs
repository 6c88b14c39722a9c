//! Voice out in a turn (issue 32, `media::speech`): a message that came in as a voice note,
//! for a persona with a voice, is answered with a voice note before its text. Best effort:
//! a speech or send failure is logged and the text goes out as without it.
//!
//! The voice note is not journaled: a gateway stopped between the voice note and the
//! reply's record says it again when the message is driven again (the text still goes once).

use troupe_connectors::{Inbound, VoiceNote};

use super::{Agent, Mind};
use crate::media::speech;
use crate::spend::{Meter, ModelRef, Purpose, Tokens, Who};

impl Agent {
    /// Says `text` in the room as a voice note when `inbound` came as one and the persona
    /// speaks; nothing otherwise (one check for a persona without a voice).
    pub(super) async fn speak(
        &self,
        mind: &Mind,
        meter: Option<&Meter>,
        inbound: &Inbound,
        text: &str,
    ) {
        let Some(speaking) = &mind.speaking else {
            return;
        };
        if !speech::came_as_voice(inbound) {
            return;
        }
        let Some(connector) = self.connector(inbound.platform()) else {
            return;
        };
        let timeout = self.settings.model_timeout;
        let spoken = match speech::speak(speaking, text, timeout, self.settings.media.max_bytes)
            .await
        {
            Ok(spoken) => spoken,
            Err(why) => {
                tracing::warn!(model = %speaking.target.model, "no voice note for the reply: {why}; the text is sent");
                return;
            }
        };
        if let Some(meter) = meter {
            let room = inbound.room.key();
            let who = Who::sender(&room, inbound);
            let model = ModelRef::new("openai", speaking.target.model.clone());
            let said = text.chars().take(speech::MAX_INPUT_CHARS).count();
            let tokens = Tokens {
                prompt: None,
                completion: None,
                cached: None,
                prompt_chars: said,
                completion_chars: 0,
            };
            meter.record(who, Purpose::Speech, &model, tokens).await;
        }
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
}
