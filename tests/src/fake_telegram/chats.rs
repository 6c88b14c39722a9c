//! Chats on the fake Telegram: members and their statuses (`getChatMember`), the bot's
//! command menu (`setMyCommands`), the chats it left (`leaveChat`), and files (`getFile` and
//! the download path).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

use super::{FakeTelegram, Shared, api_error, int, ok, structured};
use crate::wait;

impl FakeTelegram {
    /// Chats the bot left with `leaveChat`, in order.
    /// The command menu the bot set with `setMyCommands`: (command, description).
    pub fn my_commands(&self) -> Vec<(String, String)> {
        self.shared.lock().my_commands.clone()
    }

    /// Makes `user` a `creator`, `administrator` or `member` of `chat`, for `getChatMember`.
    pub fn set_member_status(&self, chat: i64, user: i64, status: &str) {
        self.shared
            .lock()
            .members
            .insert((chat, user), status.to_string());
    }

    pub fn left_chats(&self) -> Vec<i64> {
        self.shared.lock().left.clone()
    }

    pub async fn wait_for_left(&self, n: usize, timeout: Duration) -> Vec<i64> {
        self.shared
            .wait_for(timeout, |i| (i.left.len() >= n).then(|| i.left.clone()))
            .await
            .unwrap_or_else(|| {
                let expected = format!(
                    "the bot to leave {n} chat(s) (it left {:?})",
                    self.left_chats()
                );
                panic!("{}", wait::report(self, expected, timeout))
            })
    }

    /// Makes a file available to `getFile` and the download path.
    pub fn add_file(&self, file_id: &str, file_path: &str, bytes: &[u8]) {
        self.shared
            .lock()
            .files
            .insert(file_id.into(), (file_path.into(), bytes.to_vec()));
    }
}

pub(super) async fn download(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{}", shared.config.token) {
        return api_error(401, "Unauthorized");
    }
    let inner = shared.lock();
    match inner.files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => api_error(404, "Not Found"),
    }
}

/// `setMyCommands` as the Bot API documents it: 1 to 100 commands, each a `command` of 1
/// to 32 lower-case letters, digits and underscores and a `description` of 1 to 256
/// characters; `scope` and `language_code` are accepted and not modelled (one menu).
pub(super) fn set_my_commands(shared: &Shared, p: &Value) -> Response {
    let Some(Value::Array(list)) = structured(p, "commands") else {
        return api_error(400, "Bad Request: parameter \"commands\" is required");
    };
    if list.len() > 100 {
        return api_error(400, "Bad Request: too many commands specified");
    }
    let mut commands = Vec::new();
    for item in &list {
        let command = item.get("command").and_then(Value::as_str).unwrap_or("");
        let description = item
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let valid = (1..=32).contains(&command.len())
            && command
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return api_error(400, "Bad Request: BOT_COMMAND_INVALID");
        }
        if !(1..=256).contains(&description.chars().count()) {
            return api_error(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID");
        }
        commands.push((command.to_string(), description.to_string()));
    }
    shared.lock().my_commands = commands;
    ok(json!(true))
}

/// `getChatMember`: a ChatMember object with the `status` set for the user by
/// `FakeTelegram::set_member_status` (default `member`), with the fields the Bot API
/// documents for that status.
pub(super) fn get_chat_member(shared: &Shared, p: &Value) -> Response {
    let (Some(chat), Some(user)) = (int(p, "chat_id"), int(p, "user_id")) else {
        return api_error(400, "Bad Request: chat_id and user_id are required");
    };
    let status = shared
        .lock()
        .members
        .get(&(chat, user))
        .cloned()
        .unwrap_or_else(|| "member".into());
    let mut member = json!({
        "status": status,
        "user": {"id": user, "is_bot": false, "first_name": format!("user{user}")},
    });
    match status.as_str() {
        "creator" => member["is_anonymous"] = json!(false),
        "administrator" => {
            for key in [
                "is_anonymous",
                "can_be_edited",
                "can_promote_members",
                "can_post_stories",
                "can_edit_stories",
                "can_delete_stories",
            ] {
                member[key] = json!(false);
            }
            for key in [
                "can_manage_chat",
                "can_change_info",
                "can_delete_messages",
                "can_manage_video_chats",
                "can_invite_users",
                "can_restrict_members",
                "can_pin_messages",
            ] {
                member[key] = json!(true);
            }
        }
        _ => {}
    }
    ok(member)
}
