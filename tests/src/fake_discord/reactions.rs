//! Reactions on the fake Discord (issue 32), as Discord documents them
//! (specs/discord-openapi.json, gateway events MESSAGE_REACTION_ADD/REMOVE):
//! - `PUT`/`DELETE /channels/{channel}/messages/{message}/reactions/{emoji}/@me`: the bot's
//!   own reaction, 204 both (a DELETE of a reaction that is not there is 204 too), 404
//!   Unknown Message (10008) for a message the channel does not have, 401 without the token.
//!   The emoji arrives URL-encoded, as Discord requires.
//! - MESSAGE_REACTION_ADD/REMOVE dispatched for a person's reaction, with the fields the
//!   gateway sends (`member` and `message_author_id` on ADD in a guild only).
//!
//! A child module of `fake_discord`, so that it reads the fake's state directly.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Author, FakeDiscord, GUILD_ID, Shared, record};
use crate::wait;

/// One change the bot made to its own reactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnReaction {
    /// `true` for a PUT, `false` for a DELETE.
    pub added: bool,
    pub channel: String,
    pub message: String,
    pub emoji: String,
}

pub(super) async fn own_reaction(
    State(shared): State<Arc<Shared>>,
    Path((channel, message, emoji)): Path<(String, String, String)>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let added = method == axum::http::Method::PUT;
    let verb = if added { "PUT" } else { "DELETE" };
    // As sent: the emoji stays URL-encoded in the recorded path.
    let path = uri.path().trim_start_matches("/api/v10").to_string();
    if super::caller(&shared, &headers).is_none() {
        record(&shared, verb, path, 401, false);
        return super::unauthorized();
    }
    let known = {
        let mut inner = shared.lock();
        let known = inner
            .channels
            .get(&channel)
            .is_some_and(|list| list.iter().any(|m| m["id"] == message.as_str()));
        if known {
            inner.own_reactions.push(OwnReaction {
                added,
                channel: channel.clone(),
                message: message.clone(),
                emoji: emoji.clone(),
            });
        }
        known
    };
    record(&shared, verb, path, if known { 204 } else { 404 }, true);
    shared.sent.send_modify(|_| {});
    if known {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"code": 10008, "message": "Unknown Message"})),
        )
            .into_response()
    }
}

impl FakeDiscord {
    /// Every change the bot made to its own reactions, in order.
    pub fn own_reactions(&self) -> Vec<OwnReaction> {
        self.shared.lock().own_reactions.clone()
    }

    /// The bot's reactions on `message` as they stand now.
    pub fn reactions_on(&self, message: &str) -> Vec<String> {
        current(&self.shared.lock().own_reactions, message)
    }

    /// Waits until `check` holds for the bot's reaction changes; wakes on every request
    /// that changes what the bot did.
    pub async fn try_wait_for_own_reactions(
        &self,
        expected: &str,
        timeout: Duration,
        mut check: impl FnMut(&[OwnReaction]) -> bool,
    ) -> Result<Vec<OwnReaction>, String> {
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let inner = self.shared.lock();
                check(&inner.own_reactions).then(|| inner.own_reactions.clone())
            },
        )
        .await
    }

    /// `author` reacts to `message` in `channel` with the Unicode `emoji`:
    /// MESSAGE_REACTION_ADD (or REMOVE when `added` is false) on every bot's session.
    pub fn send_reaction(
        &self,
        channel: &str,
        message: &str,
        author: Author,
        emoji: &str,
        added: bool,
    ) {
        let mut inner = self.shared.lock();
        let user = inner.user(&author);
        let dm = inner.dm_channels.iter().any(|c| c == channel);
        let message_author = inner
            .channels
            .get(channel)
            .and_then(|list| list.iter().find(|m| m["id"] == message))
            .map(|m| m["author"]["id"].clone());
        let mut d = json!({
            "user_id": user["id"], "channel_id": channel, "message_id": message,
            "emoji": {"id": null, "name": emoji}, "burst": false, "type": 0,
        });
        if !dm {
            d["guild_id"] = json!(GUILD_ID);
        }
        if added {
            d["burst_colors"] = json!([]);
            if let Some(author_id) = message_author {
                d["message_author_id"] = author_id;
            }
            if !dm {
                d["member"] = json!({"user": user, "roles": [],
                    "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false,
                    "flags": 0, "nick": null});
            }
        }
        let t = if added {
            "MESSAGE_REACTION_ADD"
        } else {
            "MESSAGE_REACTION_REMOVE"
        };
        inner.dispatch(t, d);
    }
}

/// The reactions left on `message` after `log`.
fn current(log: &[OwnReaction], message: &str) -> Vec<String> {
    let mut on: Vec<String> = Vec::new();
    for r in log.iter().filter(|r| r.message == message) {
        on.retain(|e| *e != r.emoji);
        if r.added {
            on.push(r.emoji.clone());
        }
    }
    on
}
