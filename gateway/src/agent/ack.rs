//! The acknowledgement reaction (`TROUPE_ACK_REACTION`, issue 32; docs/media.md "Reactions
//! and feedback"): once the persona has decided to answer a message, its connector puts the
//! emoji on it; when the turn ends (the reply sent, or no reply after all) the emoji is
//! taken back.
//!
//! Decisions: the reaction never holds up or fails the reply. It is put on in a task of its
//! own, and taken back by [`Ack`]'s `Drop` in another, after the first has finished (so the
//! order on the platform is always put, then taken back), and only if it was put. A failure
//! is one log line. Platforms without reactions (Farcaster, the API) get nothing.

use std::sync::Arc;

use tokio::task::JoinHandle;
use troupe_connectors::{Connector, Inbound, MessageId, Platform, RoomRef};

use super::Agent;

/// The reaction on one message while its reply is made; dropping it takes it back.
pub(super) struct Ack {
    connector: Arc<dyn Connector>,
    room: RoomRef,
    message: MessageId,
    emoji: String,
    /// The task putting it on: `true` once it is on.
    put: Option<JoinHandle<bool>>,
}

impl Agent {
    /// Puts the acknowledgement on `inbound`, when one is set and its platform has
    /// reactions. Keep the answer until the turn is over.
    pub(super) fn acknowledge(&self, inbound: &Inbound) -> Option<Ack> {
        let emoji = self.settings.ack_reaction.clone()?;
        if !matches!(inbound.platform(), Platform::Discord | Platform::Telegram) {
            return None;
        }
        let connector = self.connector(inbound.platform())?;
        let (room, message) = (inbound.room.clone(), inbound.id.clone());
        let put = {
            let (connector, room, message, emoji) = (
                connector.clone(),
                room.clone(),
                message.clone(),
                emoji.clone(),
            );
            tokio::spawn(async move {
                match connector.add_reaction(&room, &message, &emoji).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not put the acknowledgement reaction on; answering without it");
                        false
                    }
                }
            })
        };
        Some(Ack {
            connector,
            room,
            message,
            emoji,
            put: Some(put),
        })
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        let Some(put) = self.put.take() else { return };
        let connector = self.connector.clone();
        let (room, message, emoji) = (
            self.room.clone(),
            self.message.clone(),
            std::mem::take(&mut self.emoji),
        );
        tokio::spawn(async move {
            if !matches!(put.await, Ok(true)) {
                return;
            }
            if let Err(e) = connector.remove_reaction(&room, &message, &emoji).await {
                tracing::warn!(error = %e, "could not take the acknowledgement reaction back");
            }
        });
    }
}
