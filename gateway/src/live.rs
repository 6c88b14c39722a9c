//! Live replies (issue 32, docs/media.md "Streaming"): the text of a reply while the model
//! writes it, for whoever shows it before it is whole (an HTTP caller's event stream, a
//! Discord or Telegram message edited as it grows).
//!
//! A [`Live`] is a watch of the text so far, not a queue of pieces: a reader that is slow
//! (a platform's edit pace) sees the latest text and skips what it missed, and a model call
//! retried after a failure starts the text over. The whole reply still goes through the
//! outbox as before; what is shown live is a preview of it.
//!
//! [`LiveReplies`] is where an HTTP caller that asked for a stream leaves its `Live` for the
//! agent that answers its message (in this process: on a shared bus the answer of another
//! replica arrives whole). A message nobody streams costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use troupe_connectors::sync::Locked;
use troupe_connectors::{AgentId, MessageId};

/// The text of one reply so far.
#[derive(Clone)]
pub struct Live {
    tx: Arc<watch::Sender<String>>,
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Live {
    pub fn new() -> Self {
        Live {
            tx: Arc::new(watch::Sender::new(String::new())),
        }
    }

    /// A reader of the text, woken at each change.
    pub fn subscribe(&self) -> watch::Receiver<String> {
        self.tx.subscribe()
    }

    /// The model call starts (again): the text is empty.
    pub fn restart(&self) {
        self.tx.send_replace(String::new());
    }

    /// The model wrote `delta`.
    pub fn push(&self, delta: &str) {
        if !delta.is_empty() {
            self.tx.send_modify(|text| text.push_str(delta));
        }
    }

    /// The whole text at once (a provider that does not stream).
    pub fn set(&self, text: &str) {
        self.tx.send_replace(text.to_string());
    }
}

/// What of a reply written so far may be shown before it is whole: everything before its
/// first `[[`, where a room-control marker (`[[action: …]]`) may start. A marker is acted
/// on and taken out of the final reply (`rooms::actions`), so it must never be shown, even
/// for a moment; the text after it is shown with the final reply.
pub fn shown(text: &str) -> &str {
    match text.find("[[") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The `Live`s that HTTP callers wait on, by persona and message.
#[derive(Clone, Default)]
pub struct LiveReplies {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// How many are registered: a message with none skips the lock.
    count: AtomicUsize,
    map: Mutex<HashMap<(AgentId, MessageId), Live>>,
}

impl LiveReplies {
    /// Registers a `Live` for `agent`'s reply to `message`, until the guard is dropped.
    pub fn watch(&self, agent: &AgentId, message: &MessageId) -> (Live, Watching) {
        let live = Live::new();
        let key = (agent.clone(), message.clone());
        if self
            .inner
            .map
            .locked()
            .insert(key.clone(), live.clone())
            .is_none()
        {
            self.inner.count.fetch_add(1, Ordering::Relaxed);
        }
        let guard = Watching {
            replies: self.clone(),
            key,
        };
        (live, guard)
    }

    /// The `Live` a caller registered for `agent`'s reply to `message`, if any.
    pub fn find(&self, agent: &AgentId, message: &MessageId) -> Option<Live> {
        if self.inner.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.inner
            .map
            .locked()
            .get(&(agent.clone(), message.clone()))
            .cloned()
    }
}

/// Unregisters a caller's `Live` when dropped.
pub struct Watching {
    replies: LiveReplies,
    key: (AgentId, MessageId),
}

impl Drop for Watching {
    fn drop(&mut self) {
        let inner = &self.replies.inner;
        if inner.map.locked().remove(&self.key).is_some() {
            inner.count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_the_text_grow_and_start_over() {
        let live = Live::new();
        let rx = live.subscribe();
        live.push("Hel");
        live.push("lo");
        assert_eq!(*rx.borrow(), "Hello");
        live.restart();
        assert_eq!(*rx.borrow(), "");
        live.set("Hi");
        assert_eq!(*rx.borrow(), "Hi");
    }

    #[test]
    fn markers_are_never_shown() {
        assert_eq!(shown("Sure. [[action: mute"), "Sure. ");
        assert_eq!(shown("plain"), "plain");
    }

    #[test]
    fn a_registration_lasts_as_long_as_its_guard() {
        let replies = LiveReplies::default();
        let agent = AgentId::from("ada");
        let message = MessageId::from("m1");
        assert!(replies.find(&agent, &message).is_none());
        let (live, guard) = replies.watch(&agent, &message);
        live.push("x");
        assert_eq!(
            *replies.find(&agent, &message).unwrap().subscribe().borrow(),
            "x"
        );
        drop(guard);
        assert!(replies.find(&agent, &message).is_none());
        assert_eq!(replies.inner.count.load(Ordering::Relaxed), 0);
    }
}
