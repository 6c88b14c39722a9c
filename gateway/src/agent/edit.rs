//! Edits and deletes of a message (issue 32; docs/media.md, "Edits and deletes").
//!
//! A connector journals an edit or a delete as an `Inbound` of its own whose `revises`
//! names the earlier message. This step runs before the message path and either ends the
//! event here or hands the path the message as edited:
//!
//! 1. an edit made more than `TROUPE_EDIT_WINDOW_SECS` after its message (the platform's
//!    own times, never this process's clock; a window of 0 follows no edit) is ignored;
//! 2. an edit or a delete of a message the persona never received is ignored;
//! 3. a delete takes back the persona's reply on the platform and drops the exchange from
//!    the room's memory;
//! 4. an edit drops the earlier exchange from memory and goes down the message path as a
//!    message: decided again when the persona had ignored it, answered again when it had
//!    answered (it was addressed to the persona then), its reply put in the earlier
//!    reply's messages (`Outbound::replaces`). Rate limits and budgets count it as any call.
//!
//! A delete that comes while its message's reply is being made stops the model call
//! (`crate::turns`, watched by the model step; `deleted_meanwhile` ends the turn): nothing is
//! posted or remembered.
//!
//! Exactly once holds as for any message: the event is one journal entry, its reply one
//! outbox entry, and the reply edits the same platform messages however often it is
//! delivered.

use troupe_connectors::{Change, Inbound, Revision};

use super::Agent;
use super::outbound::Kind;
use super::turn::{Step, Turn, done};
use crate::outcome::{Outcome, WhyNot};
use crate::storage::JournalId;

impl Agent {
    /// Revise: an edit goes on as the message it edits; a delete, or an edit or a delete
    /// that is not followed, ends the turn here. A new message costs one check.
    pub(super) async fn revise(&self, turn: &mut Turn<'_>) -> Step {
        let Some(revision) = &turn.inbound().revises else {
            return Ok(());
        };
        let edited = self.edited(turn, revision).await?;
        turn.becomes(edited);
        Ok(())
    }

    /// The message of the turn (revising as `revision` says) as the rest of the turn
    /// should take it, or the end of an event that ends here.
    async fn edited(&self, turn: &Turn<'_>, revision: &Revision) -> Step<Inbound> {
        let (journal_id, inbound) = (turn.journal, turn.inbound());
        let platform = inbound.platform();
        let change_label = match revision.change {
            Change::Edit { .. } => "edit",
            Change::Delete => "delete",
        };
        if self.too_late(inbound, revision) {
            crate::metrics::revision(platform, change_label, "too_late");
            return done(self.ended(journal_id, WhyNot::EditTooLate).await?);
        }
        let room = inbound.room.key();
        let exchange = self
            .store
            .exchange_of(&self.id, &room, &revision.of, journal_id)
            .await?;
        if exchange.entries == 0 {
            tracing::debug!(of = %revision.of, "an {change_label} of a message never received; ignored");
            crate::metrics::revision(platform, change_label, "unknown");
            return done(self.ended(journal_id, WhyNot::UnknownMessage).await?);
        }
        self.store
            .drop_exchange(&self.id, &room, &revision.of, journal_id)
            .await?;
        match revision.change {
            Change::Delete => {
                self.take_back(inbound, &exchange.reply).await;
                crate::metrics::revision(platform, change_label, "deleted");
                done(self.ended(journal_id, WhyNot::Deleted).await?)
            }
            Change::Edit { .. } => {
                tracing::debug!(of = %revision.of, answered = exchange.answered,
                    "an edited message; handling it again");
                crate::metrics::revision(platform, change_label, "rerun");
                let mut edited = inbound.clone();
                if let Some(r) = edited.revises.as_mut() {
                    r.reply = exchange.reply;
                }
                // The persona answered this message, so it was addressed to the persona;
                // the edit is that message still.
                edited.mentions_self |= exchange.answered;
                Ok(edited)
            }
        }
    }

    /// The message was deleted while its reply was being made (the model step watches,
    /// `crate::turns`): what was shown live of the reply is taken back, and the turn ends
    /// with nothing said or remembered.
    pub(super) async fn deleted_meanwhile<T>(&self, turn: &Turn<'_>) -> Step<T> {
        let inbound = turn.inbound();
        tracing::info!("the message was deleted while its reply was being made; stopped");
        crate::metrics::revision(inbound.platform(), "delete", "cancelled");
        if let Some(connector) = self.connector(inbound.platform()) {
            let key = self
                .outbound(inbound, Kind::Reply(turn.journal), String::new())
                .key;
            connector.drop_live(&key).await;
        }
        done(self.ended(turn.journal, WhyNot::Deleted).await?)
    }

    /// Whether `inbound`, an edit as `revision` says, came after the edit window
    /// (`TROUPE_EDIT_WINDOW_SECS`, by the platform's own times; a window of 0 follows no
    /// edit). A delete is never late.
    fn too_late(&self, inbound: &Inbound, revision: &Revision) -> bool {
        let Change::Edit {
            original_sent_at_ms,
        } = revision.change
        else {
            return false;
        };
        let window_ms =
            i64::try_from(self.settings.stream.edit_window.as_millis()).unwrap_or(i64::MAX);
        let late_by = inbound.sent_at_ms.saturating_sub(original_sent_at_ms);
        let late = window_ms == 0 || late_by > window_ms;
        if late {
            tracing::debug!(
                of = %revision.of,
                edited_after_ms = late_by,
                window_ms,
                "an edit outside the edit window (TROUPE_EDIT_WINDOW_SECS); ignored"
            );
        }
        late
    }

    /// Deletes the persona's reply to a deleted message. A failure is logged: the exchange
    /// is gone from memory either way, and the platform may have removed the reply itself.
    async fn take_back(&self, inbound: &Inbound, reply: &[troupe_connectors::MessageId]) {
        if reply.is_empty() {
            return;
        }
        let Some(connector) = self.connector(inbound.platform()) else {
            return;
        };
        if let Err(e) = connector.delete_messages(&inbound.room, reply).await {
            tracing::warn!(error = %e, "could not delete the reply to a deleted message");
        }
    }

    /// Closes the journal entry with nothing said and nothing remembered.
    async fn ended(&self, journal_id: JournalId, reason: WhyNot) -> anyhow::Result<Outcome> {
        self.store.journal_done(journal_id).await?;
        Ok(Outcome::Ignored { reason })
    }
}
