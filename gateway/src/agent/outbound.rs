//! One outbound message to the room a message came from, and its outbox key.
//!
//! Everything the agent says to a room answers one message (`reply_to`), in that message's
//! room: its reply, a command's answer, the give-up apology, the model-down notice. The key
//! is what makes a delivery idempotent (the outbox's unique key, the platform's dedupe id),
//! so it is made here, in one place, from what the message is and what is said about it.
//!
//! A reply may also be shown while it is written (`show_live`, issue 32): the same outbound,
//! keyed as the reply, handed to the connector as its text grows; the reply's delivery
//! then finishes the messages shown.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_connectors::{AgentId, Connector, ConnectorError, Inbound, Outbound};

use super::Agent;
use crate::live::Live;
use crate::storage::JournalId;

/// What an outbound message is to the message it answers; it makes the outbox key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The message's one reply (the model's answer, a command's, a limit's notice):
    /// `{agent}:{journal}`.
    Reply(JournalId),
    /// The apology for a message given up: `{agent}:{journal}:gave-up`.
    GaveUp(JournalId),
    /// The notice that the model is unreachable: `{agent}:model-down:{message}`. Sent
    /// straight to the connector, never recorded, so keyed by the platform's message id.
    ModelDown,
}

/// The outbox key of what `agent` says, as `kind`, about `inbound`.
fn outbox_key(agent: &AgentId, inbound: &Inbound, kind: Kind) -> String {
    match kind {
        Kind::Reply(journal_id) => format!("{agent}:{}", journal_id.0),
        Kind::GaveUp(journal_id) => format!("{agent}:{}:gave-up", journal_id.0),
        Kind::ModelDown => format!("{agent}:model-down:{}", inbound.id),
    }
}

impl Agent {
    /// `text`, said as `kind` in reply to `inbound`, in its room.
    pub(super) fn outbound(&self, inbound: &Inbound, kind: Kind, text: String) -> Outbound {
        Outbound {
            key: outbox_key(&self.id, inbound, kind),
            room: inbound.room.clone(),
            text,
            // An edit is answered as its message: the reply threads to the message itself.
            reply_to: Some(
                inbound
                    .revises
                    .as_ref()
                    .map_or(&inbound.id, |r| &r.of)
                    .clone(),
            ),
            // The re-run of an edited question puts its answer in the earlier reply's
            // messages.
            replaces: match kind {
                Kind::Reply(_) => inbound
                    .revises
                    .as_ref()
                    .map(|r| r.reply.clone())
                    .unwrap_or_default(),
                _ => Vec::new(),
            },
        }
    }
}

/// A reply being shown on its platform while it is written (issue 32): the task that shows
/// the text as it grows, at most once per `TROUPE_STREAM_EDIT_MS`.
pub(super) struct Showing {
    live: Live,
    connector: Arc<dyn Connector>,
    key: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Showing {
    /// Where the model's text goes.
    pub(super) fn live(&self) -> &Live {
        &self.live
    }

    /// The model call is over: the last show finishes, and no other starts, so that the
    /// reply's delivery (the final text) comes after every live edit.
    pub(super) async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// The model call failed: the showing stops and what it showed is taken back, since
    /// no reply will finish it.
    pub(super) async fn abandon(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.connector.drop_live(&self.key).await;
    }
}

impl Agent {
    /// Starts showing `inbound`'s reply live, where its platform edits messages and
    /// `TROUPE_STREAM` is on; `typing` is dropped at the first text shown. `None`: the
    /// reply is sent whole, as without streaming.
    pub(super) fn show_live(
        &self,
        inbound: &Inbound,
        journal_id: JournalId,
        typing: tokio_util::sync::DropGuard,
    ) -> Result<Showing, tokio_util::sync::DropGuard> {
        // Streaming off: one check, nothing looked up or spawned. The re-run of an edited
        // question is not streamed: its answer replaces the earlier one in one edit.
        if !self.settings.stream.on || inbound.revises.is_some() {
            return Err(typing);
        }
        let connector = match self.connector(inbound.platform()) {
            Some(c) if c.shows_live(&inbound.room) => c,
            _ => return Err(typing),
        };
        let live = Live::new();
        let stop = CancellationToken::new();
        let reply = self.outbound(inbound, Kind::Reply(journal_id), String::new());
        let every = self.settings.stream.edit_every;
        let key = reply.key.clone();
        let task = tokio::spawn(show(
            connector.clone(),
            reply,
            live.subscribe(),
            stop.clone(),
            every,
            typing,
        ));
        Ok(Showing {
            live,
            connector,
            key,
            stop,
            task,
        })
    }
}

/// Shows the latest text of `text` as `reply`, from one `every` after the first text on,
/// then waits `every` (or a 429's wait) before the next; until `stop`. An error other than a 429 ends the showing: the reply is still
/// delivered whole.
async fn show(
    connector: Arc<dyn Connector>,
    mut reply: Outbound,
    mut text: watch::Receiver<String>,
    stop: CancellationToken,
    every: Duration,
    typing: tokio_util::sync::DropGuard,
) {
    let mut typing = Some(typing);
    if !first_interval(&mut text, &stop, every).await {
        return;
    }
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            changed = text.changed() => if changed.is_err() { return },
        }
        let now = crate::live::shown(&text.borrow_and_update())
            .trim_end()
            .to_string();
        if now.is_empty() || now == reply.text {
            continue;
        }
        reply.text = now;
        match connector.show_live(&reply).await {
            Ok(()) => {
                // Typing shows until the first text does.
                typing.take();
                // The pace holds for the reply's delivery too: `finish` waits this out.
                tokio::time::sleep(every).await;
            }
            Err(ConnectorError::RateLimited { retry_after }) => {
                // The delivery waits out its own 429s: a stop need not wait for this.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(retry_after.max(every)) => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "could not show the reply as it is written; sending it whole");
                return;
            }
        }
    }
}

/// Waits for the first text, then one interval more: nothing is shown before the model has
/// written for that long, so an answer that is whole by then is sent whole, with no edit
/// (typing shows meanwhile). `false`: stopped first.
async fn first_interval(
    text: &mut watch::Receiver<String>,
    stop: &CancellationToken,
    every: Duration,
) -> bool {
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return false,
            changed = text.changed() => if changed.is_err() { return false },
        }
        if !crate::live::shown(&text.borrow_and_update())
            .trim()
            .is_empty()
        {
            break;
        }
    }
    tokio::select! {
        _ = stop.cancelled() => return false,
        _ = tokio::time::sleep(every) => {}
    }
    // The latest text is shown next, whether or not it changed during the wait.
    text.mark_changed();
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::tests::msg;
    use troupe_connectors::Platform;

    /// The keys are the ones stored outboxes already hold: changing one would send a
    /// reply recorded before an upgrade a second time.
    #[test]
    fn the_outbox_keys_keep_their_shape() {
        let agent = AgentId::from("eliza");
        let inbound = msg(Platform::Telegram, "hi");
        let journal = JournalId(42);
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::Reply(journal)),
            "eliza:42"
        );
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::GaveUp(journal)),
            "eliza:42:gave-up"
        );
        assert_eq!(
            outbox_key(&agent, &inbound, Kind::ModelDown),
            format!("eliza:model-down:{}", inbound.id)
        );
    }
}
