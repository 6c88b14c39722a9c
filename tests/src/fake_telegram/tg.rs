//! Builders for the updates tests push: users, chats, messages, mentions, membership.

use serde_json::{Value, json};

pub fn user(id: i64, first_name: &str) -> Value {
    json!({"id": id, "is_bot": false, "first_name": first_name})
}

pub fn bot(id: i64, first_name: &str, username: &str) -> Value {
    json!({"id": id, "is_bot": true, "first_name": first_name, "username": username})
}

/// The private chat with a user.
pub fn private_chat(user_id: i64, first_name: &str) -> Value {
    json!({"id": user_id, "type": "private", "first_name": first_name})
}

pub fn group(id: i64, title: &str) -> Value {
    json!({"id": id, "type": "group", "title": title})
}

pub fn supergroup(id: i64, title: &str) -> Value {
    json!({"id": id, "type": "supergroup", "title": title})
}

/// A supergroup with topics.
pub fn forum(id: i64, title: &str) -> Value {
    json!({"id": id, "type": "supergroup", "title": title, "is_forum": true})
}

/// A text message; the fake assigns `message_id` and `date` when it is pushed.
pub fn text(chat: Value, from: Value, text: &str) -> Value {
    json!({"chat": chat, "from": from, "text": text})
}

/// The message sent into a forum topic.
pub fn in_topic(mut message: Value, thread_id: i64) -> Value {
    message["message_thread_id"] = json!(thread_id);
    message["is_topic_message"] = json!(true);
    message
}

/// Adds a `mention` entity for the first `@username` in the text (offsets in UTF-16).
pub fn mentioning(mut message: Value, username: &str) -> Value {
    let text = message["text"].as_str().unwrap_or_default().to_string();
    let needle = format!("@{username}");
    if let Some(byte) = text.find(&needle) {
        let offset: usize = text[..byte].encode_utf16().count();
        let length = needle.encode_utf16().count();
        let entity = json!({"type": "mention", "offset": offset, "length": length});
        match message["entities"].as_array_mut() {
            Some(list) => list.push(entity),
            None => message["entities"] = json!([entity]),
        }
    }
    message
}

/// A photo with a caption, as Telegram sends it: the sizes smallest first, the largest
/// being `file_id` (add its bytes with `FakeTelegram::add_file`) of `size` bytes.
pub fn photo(chat: Value, from: Value, caption: &str, file_id: &str, size: u64) -> Value {
    json!({"chat": chat, "from": from, "caption": caption, "photo": [
        {"file_id": format!("{file_id}-thumb"), "file_unique_id": format!("t-{file_id}"),
         "width": 90, "height": 90, "file_size": 1200},
        {"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
         "width": 1280, "height": 960, "file_size": size}
    ]})
}

/// A file sent as a document (uncompressed), with a caption.
pub fn document(
    chat: Value,
    from: Value,
    caption: &str,
    file_id: &str,
    (file_name, mime_type, size): (&str, &str, u64),
) -> Value {
    json!({"chat": chat, "from": from, "caption": caption, "document": {
        "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
        "file_name": file_name, "mime_type": mime_type, "file_size": size
    }})
}

/// A command message (`/mute 10m`, `/mute@tess_bot`): the text with the
/// `bot_command` entity Telegram adds over the `/word` it starts with.
pub fn command(chat: Value, from: Value, text: &str) -> Value {
    let word = text.split_whitespace().next().unwrap_or_default();
    let mut message = self::text(chat, from, text);
    message["entities"] =
        json!([{"type": "bot_command", "offset": 0, "length": word.encode_utf16().count()}]);
    message
}

/// Makes `message` a reply to `to` (a message object as sent or pushed).
pub fn replying_to(mut message: Value, to: Value) -> Value {
    message["reply_to_message"] = to;
    message
}

/// `{"message": message}`: the fake adds the update id.
pub fn message(message: Value) -> Value {
    json!({"message": message})
}

/// `my_chat_member`: the bot (`bot_user`) was added to `chat` by `by`.
pub fn bot_added(chat: Value, by: Value, bot_user: Value) -> Value {
    json!({"my_chat_member": {
        "chat": chat,
        "from": by,
        "date": super::now(),
        "old_chat_member": {"user": bot_user.clone(), "status": "left"},
        "new_chat_member": {"user": bot_user, "status": "member"}
    }})
}
