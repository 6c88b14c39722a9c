//! Several personas on one Discord bot (issue 46, docs/discord.md "A troupe on one bot"):
//! the Discord side of [`crate::chorus`]. A message is handed to every persona sharing the
//! bot, a reply being to the persona whose message it answers (its webhook message, or its
//! prefixed message where webhooks are refused: [`said_by`]); messages from our own
//! webhooks, in any channel or guild, are never handed over. Each persona answers through
//! the channel's webhook as itself ([`super::hooks`]), as [`super::speaker`] says it may
//! appear.

use async_trait::async_trait;

use super::DiscordConnector;
use super::hooks::{Hooks, said_by};
use super::wire::{self, Snowflake};
use crate::chorus::{Chorus, Voice, Voiced};
use crate::connector::{Accepted, ConnectorError, Delivery, SinkError};
use crate::model::{Inbound, MessageId, Outbound, RoomRef};

/// Hands `inbound` (normalized from `msg`) to every persona on the bot, each told what
/// concerns it. A message from one of our webhooks is dropped here.
pub(crate) async fn accept_message(
    chorus: &Chorus,
    msg: &wire::Message,
    inbound: Inbound,
    hooks: &Hooks,
    me: Snowflake,
) -> Result<Accepted, SinkError> {
    if from_our_hook(msg, hooks).await {
        return Ok(Accepted::Duplicate);
    }
    let replied = msg.referenced_message.as_deref();
    chorus
        .fan_out(inbound, |voice| {
            replied.is_some_and(|r| said_by(r, voice, hooks, Some(me)).is_some())
        })
        .await
}

/// Whether `msg` was posted by one of our webhooks (in this channel or any other, made
/// by this replica or another).
async fn from_our_hook(msg: &wire::Message, hooks: &Hooks) -> bool {
    match msg.webhook_id.as_deref().and_then(Snowflake::parse) {
        Some(w) => hooks.is_ours_now(w.0).await,
        None => false,
    }
}

/// A persona on the shared bot speaks through webhooks; a slash command's answer and a
/// message in a user's DM go as the bot.
#[async_trait]
impl Voiced for DiscordConnector {
    fn cast(&self, voice: Voice) -> Voice {
        super::speaker::on_discord(voice)
    }

    async fn send_voiced(
        &self,
        reply: &Outbound,
        voice: &Voice,
    ) -> Result<Delivery, ConnectorError> {
        if let Some(answered) =
            super::interactions::answer(&self.rest, &self.interactions, reply).await
        {
            return answered;
        }
        if let Some(sent) = self.send_to_user(reply).await {
            return sent;
        }
        self.deliver_as(reply, Some(voice)).await
    }

    async fn show_voiced(&self, reply: &Outbound, voice: &Voice) -> Result<(), ConnectorError> {
        if self.interactions.target(reply).is_some() {
            return Ok(());
        }
        self.show_as(reply, Some(voice)).await
    }

    async fn delete_voiced(&self, room: &RoomRef, ids: &[MessageId]) -> Result<(), ConnectorError> {
        self.delete_as(room, ids).await
    }
}
