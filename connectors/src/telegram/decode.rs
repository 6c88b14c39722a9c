//! Reading a `getUpdates` answer update by update (issue 30, finding 11).
//!
//! teloxide reads a batch as one `Vec<Update>`: one update it cannot read fails the whole
//! batch, and some it panics on (teloxide-core 0.13 `unwrap`s a `message_reaction` with
//! neither `user` nor `actor_chat`, and a `poll_answer` with neither `voter_chat` nor
//! `user`). Telegram may send kinds the bot did not ask for, so a panic there would end the
//! polling task and the same update would come back after every restart. Here the batch is
//! read as plain JSON values through teloxide's own request machinery (same client, same
//! errors), and each value is turned into an `Update` on its own, inside `catch_unwind`:
//! what cannot be read, or panics, is reported by id and skipped alone.
//!
//! It owns no policy: the polling loop decides to confirm what it skips.

use serde::Serialize;
use serde_json::Value;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;
use teloxide::requests::Payload;
use teloxide::types::{AllowedUpdate, Update};

use crate::connector::panic_message;

/// `getUpdates`, answered as raw JSON values instead of teloxide's `Vec<Update>`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct RawGetUpdates {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) offset: Option<i32>,
    pub(super) timeout: u32,
    pub(super) allowed_updates: Vec<AllowedUpdate>,
}

impl Payload for RawGetUpdates {
    type Output = Vec<Value>;
    const NAME: &'static str = "GetUpdates";

    /// Like teloxide's own `GetUpdates`: the HTTP call may take as long as the long poll.
    fn timeout_hint(&self) -> Option<Duration> {
        Some(Duration::from_secs(u64::from(self.timeout)))
    }
}

/// One update of a batch, as read.
pub(super) enum Decoded {
    /// teloxide read it.
    Update(Box<Update>),
    /// It has an id but cannot be read (`why` says how it failed: an error or a panic).
    Unreadable { id: u32, why: String },
    /// Not even an `update_id`: nothing to confirm, nothing to skip past.
    NoId,
}

/// Reads one item of a `getUpdates` answer. Never panics.
pub(super) fn decode(item: &Value) -> Decoded {
    let Some(id) = item
        .get("update_id")
        .and_then(Value::as_u64)
        .and_then(|id| u32::try_from(id).ok())
    else {
        return Decoded::NoId;
    };
    // From text: teloxide's flattened types do not all read from a `Value`.
    let text = item.to_string();
    // `AssertUnwindSafe`: the closure only reads `text`; nothing is left half-changed.
    match catch_unwind(AssertUnwindSafe(|| serde_json::from_str::<Update>(&text))) {
        Ok(Ok(update)) => Decoded::Update(Box::new(update)),
        Ok(Err(e)) => Decoded::Unreadable {
            id,
            why: format!("teloxide cannot read it: {e}"),
        },
        Err(panic) => Decoded::Unreadable {
            id,
            why: format!(
                "teloxide panicked reading it: {}",
                panic_message(panic.as_ref())
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat() -> Value {
        json!({"id": -1005, "type": "supergroup", "title": "Crew"})
    }

    #[test]
    fn a_reaction_without_an_actor_is_skipped_not_a_panic() {
        // teloxide-core 0.13 unwraps `actor_chat.or(user)`: this update panics inside it.
        let poisoned = json!({"update_id": 7, "message_reaction": {
            "chat": chat(), "message_id": 3, "date": 1_700_000_000,
            "old_reaction": [], "new_reaction": [{"type": "emoji", "emoji": "👍"}]}});
        match decode(&poisoned) {
            Decoded::Unreadable { id, why } => {
                assert_eq!(id, 7);
                assert!(why.contains("panicked"), "{why}");
            }
            _ => panic!("the poisoned update was not reported as unreadable"),
        }
    }

    #[test]
    fn a_poll_answer_without_a_voter_is_skipped_not_a_panic() {
        let poisoned = json!({"update_id": 8, "poll_answer": {"poll_id": "p", "option_ids": [0]}});
        assert!(matches!(
            decode(&poisoned),
            Decoded::Unreadable { id: 8, .. }
        ));
    }

    #[test]
    fn good_updates_and_broken_ones_are_told_apart() {
        let good = json!({"update_id": 9, "message": {"message_id": 1, "date": 1_700_000_000,
            "chat": chat(), "from": {"id": 5, "is_bot": false, "first_name": "Ann"}, "text": "hi"}});
        assert!(matches!(decode(&good), Decoded::Update(u) if u.id.0 == 9));
        assert!(matches!(decode(&json!({"update_id": "x"})), Decoded::NoId));
        // A kind teloxide cannot read without panicking is kept as `UpdateKind::Error`, which
        // the polling loop confirms and skips like any kind it does not handle.
        assert!(matches!(
            decode(&json!({"update_id": 10, "message": {"nonsense": 1}})),
            Decoded::Update(u) if u.id.0 == 10
                && matches!(u.kind, teloxide::types::UpdateKind::Error(_))
        ));
    }
}
