//! The media steps of a turn (issue 32; `crate::media` owns the policy): a message's voice
//! notes are heard before anything reads its text (`hear`), and its images go into the
//! prompt once it is composed (`see`): as image parts for a model that sees, described in
//! words by the persona's vision model for one that does not, or as a line saying why not.
//! A message without files costs one check for each.
//!
//! Both change the message the rest of the turn sees (`Turn::becomes`): a transcript is its
//! text from here on, memory included, and a vision model's description is what the room
//! remembers of its images.

use troupe_connectors::Inbound;

use super::Agent;
use super::turn::Turn;
use crate::media::{self, Sources, keep::Keep, vision, voice};
use crate::persona::Prompt;

impl Agent {
    /// Hear: the message's voice notes transcribed into its text (`media::voice`), each
    /// transcription admitted by the persona's budgets and metered as `transcribe`.
    pub(super) async fn hear(&self, turn: &mut Turn<'_>) {
        let inbound = turn.inbound();
        if inbound.attachments.is_empty() {
            return;
        }
        let sources = self.sources(inbound);
        let hearing = voice::Hearing {
            sources: &sources,
            provider: &*turn.mind.provider,
            on: self.settings.media.transcribe,
            model: &self.settings.media.transcribe_model,
            meter: turn.meter.as_ref(),
        };
        if let Some(heard) = voice::hear(inbound, &hearing).await {
            turn.becomes(heard);
        }
    }

    /// See: the message's images in `prompt`, image parts or a line for a model that cannot
    /// see them; when the vision model described them, the room remembers the description.
    pub(super) async fn see(&self, turn: &mut Turn<'_>, prompt: &mut Prompt) {
        if turn.inbound().attachments.is_empty() {
            return;
        }
        if let Some(description) = self.images(turn, prompt).await {
            let described = media::described(turn.inbound(), &description);
            turn.becomes(described);
        }
    }

    /// Adds the message's images to `prompt`: fetched by reference now, so the journal and
    /// the bus never carried their bytes, and kept for the console's history under the
    /// turn's journal entry. Returns what the vision model said they show, when it
    /// described them (for a persona whose own model does not see).
    async fn images(&self, turn: &Turn<'_>, prompt: &mut Prompt) -> Option<String> {
        let inbound = turn.inbound();
        let keep = Keep {
            journal: turn.journal,
            keep_days: self.settings.media.keep_days,
        };
        let sources = Sources {
            keep: Some(keep),
            ..self.sources(inbound)
        };
        let model = turn.mind.provider.model();
        if let Some(vision) = &turn.mind.vision
            && !media::sees(sources.vision, &model.model)
        {
            let meter = turn.meter.as_ref();
            return vision::images_described(inbound, vision, meter, &sources, prompt).await;
        }
        let seen = media::load(inbound, &model.model, &sources).await;
        media::attach(prompt, seen);
        None
    }

    /// Where `inbound`'s files come from (`media::Sources`); nothing kept.
    fn sources(&self, inbound: &Inbound) -> Sources<'_> {
        Sources {
            store: &self.store,
            connector: self.connector(inbound.platform()),
            fetcher: &self.fetcher,
            vision: self.settings.media.vision,
            cap: self.settings.media.max_bytes,
            keep: None,
        }
    }
}
