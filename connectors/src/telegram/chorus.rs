//! Several personas on one Telegram bot (issue 46, docs/telegram.md "A troupe on one bot"):
//! the Telegram side of [`crate::chorus`]. A Telegram bot always shows its own name and
//! picture, so a persona on a shared bot speaks with its name in front, `Name: `, the
//! `Name:` bold through a `bold` entity (offsets in UTF-16 code units, as the Bot API
//! counts them), never through `parse_mode`: the reply's own text stays plain.
//!
//! What the prefix is, and how a reply is split with it, is [`super::prefix`]'s. A reply
//! to one of the bot's messages is the persona's whose prefix starts that message; the
//! bot's own messages are never input (`normalize`).

use async_trait::async_trait;
use teloxide::types::{Update, UpdateKind};

use super::TelegramConnector;
use super::normalize::BotIdentity;
use super::prefix::Prefix;
use crate::chorus::{Chorus, Voice, Voiced};
use crate::connector::{Accepted, ConnectorError, Delivery, SinkError};
use crate::model::{Inbound, Outbound};

/// The text of the bot's own message that `update`'s message replies to.
fn replied_own<'u>(update: &'u Update, me: &BotIdentity) -> Option<&'u str> {
    let message = match &update.kind {
        UpdateKind::Message(m) | UpdateKind::EditedMessage(m) => m,
        _ => return None,
    };
    let replied = message.reply_to_message()?;
    if replied.from.as_ref()?.id.0 != me.id {
        return None;
    }
    replied.text().or_else(|| replied.caption())
}

/// Hands `inbound` (normalized from `update`) to every persona on the bot: a reply to the
/// bot's message is to the persona whose prefix starts it.
pub(super) async fn hand_over(
    chorus: &Chorus,
    update: &Update,
    me: &BotIdentity,
    inbound: Inbound,
) -> Result<Accepted, SinkError> {
    let replied = replied_own(update, me);
    chorus
        .fan_out(inbound, |voice| {
            replied.is_some_and(|text| Prefix::of(voice).starts(text))
        })
        .await
}

/// A persona on the shared bot speaks as the bot, its name in front.
#[async_trait]
impl Voiced for TelegramConnector {
    async fn send_voiced(
        &self,
        reply: &Outbound,
        voice: &Voice,
    ) -> Result<Delivery, ConnectorError> {
        self.deliver_as(reply, Some(&Prefix::of(voice))).await
    }

    async fn show_voiced(&self, reply: &Outbound, voice: &Voice) -> Result<(), ConnectorError> {
        self.show_as(reply, Some(&Prefix::of(voice))).await
    }
}
