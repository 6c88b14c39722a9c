//! Showing the reply while it is written (issue 32, docs/media.md "Streaming"), and the
//! typing indicator until it shows.
//!
//! Where a reply is shown as the model writes it: to an HTTP caller that asked for a stream
//! (`TROUPE_STREAM` on; its `Live` waits in `crate::live`), or on a platform that edits
//! messages (Discord, Telegram; `TROUPE_STREAM` on), where a task edits the reply's message
//! as the text grows. A voice note answered by voice is not shown live: its voice note goes
//! before its text (`speak.rs`) and is made from the whole text anyway; nor is the re-run of
//! an edited question, whose answer replaces the earlier one in one edit. The model step
//! (`model.rs`) asks for a [`Streaming`] before its calls, hands their `live` to the
//! provider, and ends it when they are over.
//!
//! What is shown is a preview: the reply still goes through the outbox whole, keyed as the
//! messages shown (`outbound.rs`), and finishes them.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use troupe_connectors::{Connector, ConnectorError, Inbound, Outbound, Platform};

use super::Agent;
use super::outbound::Kind;
use super::turn::Turn;
use crate::live::Live;
use crate::storage::JournalId;

/// Where a turn's reply shows while it is written, and its typing indicator meanwhile.
pub(super) struct Streaming {
    /// The reply shown on its platform as it grows (typing stops at its first text).
    showing: Option<Showing>,
    /// The HTTP caller's stream.
    caller: Option<Live>,
    /// The typing indicator, while nothing shows it is written.
    typing: Option<DropGuard>,
}

impl Streaming {
    /// Where the model's text goes as it is written; `None`: the reply comes whole.
    pub(super) fn live(&self) -> Option<&Live> {
        self.showing
            .as_ref()
            .map(Showing::live)
            .or(self.caller.as_ref())
    }

    /// The model calls are over (`result`): typing stops, and what was shown is finished (so
    /// that the reply's delivery comes after every live edit) or, when they failed, taken
    /// back, since no reply will finish it.
    pub(super) async fn end<T, E>(self, result: &Result<T, E>) {
        drop(self.typing);
        match (self.showing, result) {
            (Some(showing), Ok(_)) => showing.finish().await,
            (Some(showing), Err(_)) => showing.abandon().await,
            (None, _) => {}
        }
    }
}

impl Agent {
    /// How the turn's reply shows while it is written, typing on until it does. Not on the
    /// Web platform, which shows no typing: there an HTTP caller may stream it.
    pub(super) fn streaming(&self, turn: &Turn<'_>) -> Streaming {
        let inbound = turn.inbound();
        let typing = self.keep_typing(inbound);
        // A persona without a voice pays one `Option` check.
        let by_voice = turn.mind.speaking.is_some() && crate::media::speech::came_as_voice(inbound);
        let whole = |typing| Streaming {
            showing: None,
            caller: None,
            typing: Some(typing),
        };
        if inbound.platform() == Platform::Web {
            return Streaming {
                caller: self.live_for(inbound),
                ..whole(typing)
            };
        }
        if by_voice {
            return whole(typing);
        }
        match self.show_live(inbound, turn.journal, typing) {
            Ok(showing) => Streaming {
                showing: Some(showing),
                caller: None,
                typing: None,
            },
            Err(typing) => whole(typing),
        }
    }

    /// The HTTP caller's `Live` for this message, when it asked for a stream and
    /// `TROUPE_STREAM` is on.
    fn live_for(&self, inbound: &Inbound) -> Option<Live> {
        if !self.settings.stream.on {
            return None;
        }
        self.waiters.live().find(&self.id, &inbound.id)
    }

    /// Keeps the platform's typing indicator on until the returned guard is dropped.
    fn keep_typing(&self, inbound: &Inbound) -> DropGuard {
        let token = CancellationToken::new();
        // The Web platform shows no typing: no task and no timer per message.
        if inbound.platform() == Platform::Web {
            return token.drop_guard();
        }
        if let Some(connector) = self.connector(inbound.platform()) {
            let room = inbound.room.clone();
            let stop = token.clone();
            tokio::spawn(async move {
                loop {
                    let _ = connector.typing(&room).await;
                    // Discord's indicator lasts about 10 s, Telegram's about 5 s.
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(4)) => {}
                    }
                }
            });
        }
        token.drop_guard()
    }
}

/// A reply being shown on its platform while it is written (issue 32): the task that shows
/// the text as it grows, at most once per `TROUPE_STREAM_EDIT_MS`.
struct Showing {
    live: Live,
    connector: Arc<dyn Connector>,
    key: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Showing {
    /// Where the model's text goes.
    fn live(&self) -> &Live {
        &self.live
    }

    /// The model call is over: the last show finishes, and no other starts, so that the
    /// reply's delivery (the final text) comes after every live edit.
    async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// The model call failed: the showing stops and what it showed is taken back, since
    /// no reply will finish it.
    async fn abandon(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.connector.drop_live(&self.key).await;
    }
}

impl Agent {
    /// Starts showing `inbound`'s reply live, where its platform edits messages and
    /// `TROUPE_STREAM` is on; `typing` is dropped at the first text shown. `None`: the
    /// reply is sent whole, as without streaming.
    fn show_live(
        &self,
        inbound: &Inbound,
        journal_id: JournalId,
        typing: DropGuard,
    ) -> Result<Showing, DropGuard> {
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
    typing: DropGuard,
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
