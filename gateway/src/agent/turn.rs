//! One message's turn as a value (issue 45): what the steps of `Agent::process` share, and
//! how a step ends the turn early.
//!
//! A [`Turn`] carries the message's journal entry, the message as the steps see it, and
//! what the persona runs with for this message (its `Mind`, read once, so that a reload
//! takes effect between two messages, never inside one, and its spend meter). The message
//! changes in three places, each a step that says so (`Turn::becomes`): an edit is taken as
//! the message it edits (`edit.rs`), a voice note's transcript joins its text and a vision
//! model's description of its images joins what the room remembers (`media.rs`). Until one
//! does, the turn borrows the message it was given: a plain message is never copied.
//!
//! A step returns a [`Step`]: `Ok` to go on, or `Err(Stop::Done(outcome))` when the message's
//! handling ends there (ignored, limited, answered by a command, a failed model call), or
//! `Err(Stop::Storage(error))` for a storage failure, which `handle` waits out. `?` stops the
//! turn either way, so `process` reads as the list of its steps.

use std::borrow::Cow;
use std::sync::Arc;

use troupe_connectors::Inbound;

use super::Mind;
use crate::outcome::Outcome;
use crate::spend::Meter;
use crate::storage::JournalId;

/// What the steps of one message's turn share.
pub(super) struct Turn<'a> {
    /// The message's journal entry: its reply's outbox key, and the record that closes it.
    pub(super) journal: JournalId,
    /// The message as the steps see it (see the module doc).
    inbound: Cow<'a, Inbound>,
    /// The persona and its models, as they were when the turn began.
    pub(super) mind: Arc<Mind>,
    /// The persona's spend meter, when spend is on.
    pub(super) meter: Option<Meter>,
    /// A stranger in a DM (issue 44): the persona's tools are not offered to them.
    pub(super) untrusted: bool,
}

impl<'a> Turn<'a> {
    pub(super) fn new(
        journal: JournalId,
        inbound: &'a Inbound,
        mind: Arc<Mind>,
        meter: Option<Meter>,
    ) -> Self {
        Turn {
            journal,
            inbound: Cow::Borrowed(inbound),
            mind,
            meter,
            untrusted: false,
        }
    }

    /// The message, as the steps so far have made it.
    pub(super) fn inbound(&self) -> &Inbound {
        &self.inbound
    }

    /// From here on the message is `inbound`: an edit as edited, a voice note with its
    /// transcript, images with their description.
    pub(super) fn becomes(&mut self, inbound: Inbound) {
        self.inbound = Cow::Owned(inbound);
    }
}

/// How a step ends the turn before its reply.
#[derive(Debug)]
pub(super) enum Stop {
    /// The message's handling ends here, with this outcome.
    Done(Outcome),
    /// Storage failed: `handle` waits for the database and handles the message again.
    Storage(anyhow::Error),
}

/// What a step returns: its result, or why the turn stops.
pub(super) type Step<T = ()> = Result<T, Stop>;

impl<E: Into<anyhow::Error>> From<E> for Stop {
    fn from(error: E) -> Self {
        Stop::Storage(error.into())
    }
}

/// Ends the turn with `outcome`.
pub(super) fn done<T>(outcome: Outcome) -> Step<T> {
    Err(Stop::Done(outcome))
}
