//! Resume: a message driven again (a redelivery, a replay at start) may have been handled
//! already, or may have had all its attempts; then it is answered from the journal, or
//! given up with a short apology to its room.

use troupe_connectors::Platform;

use super::Agent;
use super::outbound::Kind;
use super::turn::{Step, Turn, done};
use crate::outcome::Outcome;
use crate::storage::{Attempt, JournalState};

/// The short reply a room gets, at most once per `APOLOGY_QUIET_MS`, when troupe gives up a
/// message that kept stopping the gateway.
const GAVE_UP: &str =
    "Sorry, I couldn't answer that message. Please try again, or send it differently.";

/// A room that got the give-up apology gets no other for this long: a burst of poison
/// messages (or several replicas giving up) says sorry once.
const APOLOGY_QUIET_MS: i64 = 60 * 60 * 1000;

impl Agent {
    /// Journal: a message published before may have been handled since (by another
    /// replica, or by a drive that raced this one): its recorded replies stand. Otherwise
    /// this handling is counted before it starts, so that one that crashes the process
    /// counts too, and a message that had all its attempts is given up instead (see
    /// storage::journal). A first publication was counted by its journal insert, and skips
    /// this step. `Ok` when the message is to be handled.
    pub(super) async fn resume(&self, turn: &Turn<'_>) -> Step {
        let journal = turn.journal;
        match self
            .store
            .journal_begin(journal, self.settings.max_attempts)
            .await?
        {
            Attempt::Started { .. } => Ok(()),
            Attempt::Done => {
                let replies = self.store.replies_for(journal).await?;
                done(Outcome::Replied {
                    texts: replies.into_iter().map(|o| o.text).collect(),
                    origin: crate::outcome::Origin::Other,
                })
            }
            Attempt::Exhausted {
                attempts,
                state,
                last_error,
            } => done(self.give_up(turn, attempts, state, last_error).await?),
        }
    }

    /// Gives up a message that had all its attempts: it is never handled again. One that
    /// never finished (the process stopped while handling it, `state` pending) is marked
    /// failed with the reason, and its room gets the short apology unless it had one
    /// recently (the Web platform has no room to post to: its caller gets the outcome).
    async fn give_up(
        &self,
        turn: &Turn<'_>,
        attempts: i32,
        state: JournalState,
        last_error: Option<String>,
    ) -> anyhow::Result<Outcome> {
        let reason = match (state, last_error) {
            (JournalState::Failed, Some(error)) => {
                format!("gave up after {attempts} attempts: {error}")
            }
            _ => {
                format!("gave up after {attempts} attempts: the gateway stopped while handling it")
            }
        };
        if state != JournalState::Pending {
            tracing::warn!(attempts, %reason, "not handling the message again");
            return Ok(Outcome::GaveUp { reason });
        }
        let (journal, inbound) = (turn.journal, turn.inbound());
        let apology = (inbound.platform() != Platform::Web)
            .then(|| self.outbound(inbound, Kind::GaveUp(journal), GAVE_UP.to_string()));
        let gave_up = self
            .store
            .journal_give_up(journal, &reason, apology.as_ref(), APOLOGY_QUIET_MS)
            .await?;
        if gave_up.first {
            crate::metrics::error("gave_up");
            tracing::error!(
                attempts,
                apology = gave_up.apology.is_some(),
                "{reason}; the message is marked failed and will not be driven again"
            );
        }
        if let Some(outbox_id) = gave_up.apology {
            self.outbox.deliver(outbox_id).await?;
        }
        Ok(Outcome::GaveUp { reason })
    }
}
