//! Read-mostly routes the console needs beyond the stable API: what went into a reply's
//! prompt (`why`), a room's facts with their ids and deleting one, and how each persona is
//! set up on its platforms (which variable to set, the Discord invite link, the Farcaster
//! account). They sit under `/api`, behind the same token and caller budget as the rest.
//!
//! Connector *health* is not repeated here: the console reads it from `/readyz`, which
//! already checks every connector (and knows standby replicas).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use troupe_connectors::{MessageId, Platform};

use super::AppState;
use super::error::ApiError;
use super::extract::{AgentPath, RoomPath};
use crate::storage::IdentifiedFact;
use crate::why::PromptContext;

/// The "why" panel of a reply: its prompt's context, and the 👍/👎 people put on it
/// (issue 32; `crate::feedback`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyView {
    #[serde(flatten)]
    context: PromptContext,
    feedback: crate::storage::FeedbackTally,
}

/// `GET /api/agents/{agent}/rooms/{room}/messages/{messageId}/why`.
pub async fn why(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    RoomPath(room): RoomPath,
    Path(params): Path<std::collections::HashMap<String, String>>,
) -> Result<Json<WhyView>, ApiError> {
    let raw = params.get("message").map(String::as_str).unwrap_or("");
    if raw.is_empty() || raw.len() > 200 {
        return Err(ApiError::bad_request("`messageId` must be 1 to 200 bytes"));
    }
    let message = MessageId::new(raw);
    match crate::why::lookup(&agent.id, &room, &message) {
        Some(context) => Ok(Json(WhyView {
            context: (*context).clone(),
            feedback: state
                .store
                .feedback_on_reply_to(&agent.id, &room, &message)
                .await?,
        })),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_recorded",
            "this replica holds no prompt context for that message: it was not answered \
             here, or more than an hour or 2,000 replies ago",
        )),
    }
}

#[derive(Debug, Serialize)]
pub struct FactList {
    facts: Vec<IdentifiedFact>,
}

/// `GET /api/agents/{agent}/rooms/{room}/facts`: the memories route's facts, with ids.
pub async fn facts(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    RoomPath(room): RoomPath,
) -> Result<Json<FactList>, ApiError> {
    let facts = state.store.room_facts_with_ids(&agent.id, &room).await?;
    Ok(Json(FactList { facts }))
}

/// `DELETE /api/agents/{agent}/facts/{id}`: 204, or 404 when the persona has no such fact.
pub async fn delete_fact(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path(params): Path<std::collections::HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let id: i64 = params
        .get("id")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::bad_request("the fact id is a number"))?;
    if state.store.delete_fact(&agent.id, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "persona `{}` has no fact {id}",
            agent.id
        )))
    }
}

/// How one persona is set up on one platform. Never carries a secret.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlatformSetup {
    platform: Platform,
    /// The variable (or `settings.secrets` key) that turns the connector on.
    token_var: Option<&'static str>,
    token_set: bool,
    /// Discord: the invite link, when `DISCORD_APPLICATION_ID` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    invite_url: Option<String>,
    /// Telegram: `https://t.me/<username>`, when the token is set and `getMe` answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    bot_url: Option<String>,
    /// Farcaster: the account's profile, when `FARCASTER_FID` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile_url: Option<String>,
    /// What else to set, in words, when something is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Setup {
    platforms: Vec<PlatformSetup>,
}

/// `GET /api/agents/{agent}/setup`.
pub async fn setup(State(state): State<AppState>, AgentPath(agent): AgentPath) -> Json<Setup> {
    let mind = agent.mind();
    let persona = &mind.persona;
    // With the tokens the console stored since the start (issue 47).
    let env = &state.secrets.overlay(&state.config.env);
    let mut platforms = Vec::new();
    for platform in persona.platforms_in(env) {
        if platform == Platform::Web {
            continue;
        }
        let token_var = crate::persona::token_key(platform);
        let token_set = persona.platform_token(platform, env).is_some();
        let mut setup = PlatformSetup {
            platform,
            token_var,
            token_set,
            invite_url: None,
            bot_url: None,
            profile_url: None,
            hint: None,
        };
        match platform {
            // The invite is the connector's own (one permission list, one URL).
            Platform::Discord => match persona
                .secret("DISCORD_APPLICATION_ID", env)
                .and_then(|app| app.trim().parse::<u64>().ok())
            {
                Some(app) => {
                    setup.invite_url = Some(troupe_connectors::discord::invite_url(app));
                }
                _ => {
                    setup.hint = Some(
                        "set DISCORD_APPLICATION_ID (the developer portal's Application ID) \
                         for an invite link"
                            .into(),
                    )
                }
            },
            Platform::Telegram => {
                setup.bot_url = super::telegram_link::bot_link(persona, env).await;
                if setup.bot_url.is_none() {
                    setup.hint = Some(
                        "the bot's link is https://t.me/<username>, with the username \
                         BotFather gave it (shown here once the token is set and Telegram \
                         answers)"
                            .into(),
                    );
                }
            }
            Platform::Farcaster => match persona.secret("FARCASTER_FID", env) {
                Some(fid) if fid.chars().all(|c| c.is_ascii_digit()) => {
                    setup.profile_url = Some(format!("https://farcaster.xyz/~/profiles/{fid}"));
                }
                _ => setup.hint = Some("set FARCASTER_FID, the bot account's id".into()),
            },
            Platform::Web => {}
        }
        platforms.push(setup);
    }
    Json(Setup { platforms })
}
