//! Reactions on the fake Telegram (issue 32), as the Bot API documents them
//! (specs/telegram-api.json): `setMessageReaction` (`chat_id`, `message_id`, `reaction`: a
//! list of ReactionType; a bot sets at most one; an empty or absent list takes its reaction
//! back) and the `message_reaction` update (MessageReactionUpdated: `chat`, `message_id`,
//! `user`, `date`, `old_reaction`, `new_reaction`). Updates go through `push_update`, so a
//! bot that did not ask for `message_reaction` in `allowed_updates` never gets them.
//!
//! A child module of `fake_telegram`, so that it uses the fake's helpers directly.

use serde_json::{Value, json};

use super::{FakeTelegram, api_error, int, ok, structured};

/// The emoji Telegram takes as a reaction (the Bot API's ReactionTypeEmoji list).
const REACTION_EMOJI: &[&str] = &[
    "❤",
    "👍",
    "👎",
    "🔥",
    "🥰",
    "👏",
    "😁",
    "🤔",
    "🤯",
    "😱",
    "🤬",
    "😢",
    "🎉",
    "🤩",
    "🤮",
    "💩",
    "🙏",
    "👌",
    "🕊",
    "🤡",
    "🥱",
    "🥴",
    "😍",
    "🐳",
    "❤‍🔥",
    "🌚",
    "🌭",
    "💯",
    "🤣",
    "⚡",
    "🍌",
    "🏆",
    "💔",
    "🤨",
    "😐",
    "🍓",
    "🍾",
    "💋",
    "🖕",
    "😈",
    "😴",
    "😭",
    "🤓",
    "👻",
    "👨‍💻",
    "👀",
    "🎃",
    "🙈",
    "😇",
    "😨",
    "🤝",
    "✍",
    "🤗",
    "🫡",
    "🎅",
    "🎄",
    "☃",
    "💅",
    "🤪",
    "🗿",
    "🆒",
    "💘",
    "🙉",
    "🦄",
    "😘",
    "💊",
    "🙊",
    "😎",
    "👾",
    "🤷‍♂",
    "🤷",
    "🤷‍♀",
    "😡",
];

/// `setMessageReaction`.
pub(super) fn set_message_reaction(p: &Value) -> axum::response::Response {
    if int(p, "chat_id").is_none() {
        return api_error(400, "Bad Request: chat_id is empty");
    }
    if int(p, "message_id").is_none() {
        return api_error(400, "Bad Request: message_id is empty");
    }
    let list = match structured(p, "reaction") {
        None => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(_) => return api_error(400, "Bad Request: can't parse reaction types"),
    };
    if list.len() > 1 {
        return api_error(400, "Bad Request: REACTIONS_TOO_MANY");
    }
    for r in &list {
        let emoji = r.get("emoji").and_then(Value::as_str).unwrap_or_default();
        if r.get("type").and_then(Value::as_str) != Some("emoji")
            || !REACTION_EMOJI.contains(&emoji)
        {
            return api_error(400, "Bad Request: REACTION_INVALID");
        }
    }
    ok(json!(true))
}

impl FakeTelegram {
    /// The bot's reaction on `message_id` in `chat` as it stands after its
    /// `setMessageReaction` calls: the emoji, or none.
    pub fn bot_reaction(&self, chat: i64, message_id: i64) -> Option<String> {
        let mut now = None;
        for call in self.calls_to("setMessageReaction") {
            let params = Value::Object(call.params.clone());
            if call.status != 200
                || int(&params, "chat_id") != Some(chat)
                || int(&params, "message_id") != Some(message_id)
            {
                continue;
            }
            now = structured(&params, "reaction")
                .and_then(|l| l.get(0).cloned())
                .and_then(|r| r.get("emoji").and_then(Value::as_str).map(str::to_string));
        }
        now
    }

    /// Queues a `message_reaction` update: `user` changed their reactions on `message_id`
    /// in `chat` from `old` to `new` (emoji). Returns the update id.
    pub fn push_reaction(
        &self,
        chat: Value,
        message_id: i64,
        user: Value,
        old: &[&str],
        new: &[&str],
    ) -> i64 {
        let list = |l: &[&str]| -> Vec<Value> {
            l.iter()
                .map(|e| json!({"type": "emoji", "emoji": e}))
                .collect()
        };
        self.push_update(json!({"message_reaction": {
            "chat": chat, "message_id": message_id, "user": user,
            "date": 1_700_000_100, "old_reaction": list(old), "new_reaction": list(new),
        }}))
    }
}
