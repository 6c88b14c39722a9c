//! `POST /api/agents/{agent}/rooms/{room}/commands`: a chat command given through the API
//! (docs/rooms.md, docs/api.md). The caller holds the API token (or is on loopback), so it
//! may steer any room of the persona, on any platform; the answer comes back in the
//! response and is not posted to the room.

use axum::Json;
use serde::{Deserialize, Serialize};
use troupe_connectors::UserId;
use troupe_connectors::command;

use super::error::{ApiError, ApiJson};
use super::extract::{AgentPath, RoomPath};
use crate::rooms::Steering;

/// The body: the command as a person types it, and whose it is.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostCommand {
    /// `/mute 10m`, `/forget`, … (the leading `/` may be left out).
    command: String,
    /// The platform user it is given for (`/forgetme` forgets their facts); default the
    /// API's anonymous user.
    user_id: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandAnswer {
    command: String,
    reply: String,
}

pub async fn post_command(
    AgentPath(agent): AgentPath,
    RoomPath(room): RoomPath,
    ApiJson(body): ApiJson<PostCommand>,
) -> Result<Json<CommandAnswer>, ApiError> {
    let text = body.command.trim();
    if text.is_empty() || text.len() > 200 {
        return Err(ApiError::bad_request(
            "`command` must be 1 to 200 characters, such as \"/mute 10m\"",
        ));
    }
    let text = if text.starts_with('/') {
        text.to_string()
    } else {
        format!("/{text}")
    };
    let Some(line) = command::parse(&text) else {
        return Err(ApiError::bad_request(format!(
            "`{text}` is not a command: expected /name and its arguments, see /help"
        )));
    };
    if let command::Command::Unknown(_) | command::Command::Invalid { .. } = &line.command {
        let answer = agent
            .run_command(
                &line.command,
                room,
                &UserId::new(crate::web::ANONYMOUS_USER),
                Steering::Allowed,
                crate::tools::policy::RoomKind::Group,
            )
            .await
            .map_err(ApiError::internal)?;
        return Err(ApiError::bad_request(answer.text));
    }
    let user = match body.user_id.as_deref().map(str::trim) {
        None => UserId::new(crate::web::ANONYMOUS_USER),
        Some(u) if !u.is_empty() && u.len() <= 200 => UserId::new(u),
        Some(_) => {
            return Err(ApiError::bad_request(
                "`userId` must be 1 to 200 characters",
            ));
        }
    };
    // The operator asks about a room by its key, which does not say whether it is a DM:
    // the answer is what a group room of that key may use (the API's own rooms: all).
    let kind = crate::tools::policy::RoomKind::Group;
    let answer = agent
        .run_command(&line.command, room, &user, Steering::Allowed, kind)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(CommandAnswer {
        command: line.command.name().to_string(),
        reply: answer.text,
    }))
}
