//! Connecting a persona to a platform from the console (issue 47; docs/console.md,
//! "Platforms"): `GET /api/agents/{agent}/platforms`, `PUT` and `DELETE
//! /api/agents/{agent}/platforms/{platform}`.
//!
//! - A token is checked live with its platform (through the same base-URL settings the
//!   connector uses) before anything is kept; a refused one keeps nothing.
//! - It is kept in the secrets file (`crate::secrets_file`), never in the character file,
//!   and the persona's connectors restart with it at once (`crate::connect::Reconnect`).
//! - No answer carries a secret: only where each comes from and its last 4 characters.
//! - Operator only: a scoped token's routes do not include these (`auth::scoped_access`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use troupe_connectors::{CheckError, Platform};

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::extract::AgentPath;
use crate::agent::Agent;
use crate::connect::{AccountView, KeyView, key_views, keys, set_in_env};
use crate::persona::{Env, Persona, credential_key, stored_name};

/// One platform of a persona, as the console shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlatformView {
    platform: Platform,
    /// Whether its credential is set (from anywhere) and usable.
    connected: bool,
    /// Whether a connector for it runs now.
    running: bool,
    /// Each key that is set, where from, and its last 4 characters.
    keys: Vec<KeyView>,
    /// Why a credential is held back, when it is (the file names its own endpoint).
    #[serde(skip_serializing_if = "Option::is_none")]
    withheld: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Platforms {
    platforms: Vec<PlatformView>,
    /// The secrets file's path, and why troupe will not write it, if it will not.
    secrets_file: SecretsFileView,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SecretsFileView {
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

/// The answer to a `PUT`: the account the token belongs to, and the platform now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Connected {
    account: AccountView,
    #[serde(flatten)]
    platform: PlatformView,
}

/// `PUT …/platforms/{platform}`: `token` is the bot token (Discord, Telegram) or the
/// Neynar API key (Farcaster, with `fid` and optionally `signerUuid`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connect {
    token: String,
    #[serde(default)]
    fid: Option<serde_json::Value>,
    #[serde(default)]
    signer_uuid: Option<String>,
}

/// `GET /api/agents/{agent}/platforms`.
pub async fn list(State(state): State<AppState>, AgentPath(agent): AgentPath) -> Json<Platforms> {
    let env = state.secrets.overlay(&state.config.env);
    let persona = &agent.mind().persona;
    let platforms = [Platform::Discord, Platform::Telegram, Platform::Farcaster]
        .into_iter()
        .map(|p| view(&state, &agent, persona, p, &env))
        .collect();
    Json(Platforms {
        platforms,
        secrets_file: SecretsFileView {
            path: state.config.secrets_file.display().to_string(),
            refused: state.secrets.refused(),
        },
    })
}

fn view(
    state: &AppState,
    agent: &Agent,
    persona: &Persona,
    platform: Platform,
    env: &Env,
) -> PlatformView {
    let withheld = persona
        .withheld_on(platform, env)
        .first()
        .map(|w| w.message());
    let credential = credential_key(platform).and_then(|k| persona.secret(k, env));
    PlatformView {
        platform,
        connected: credential.is_some() && persona.platforms_in(env).contains(&platform),
        running: state.connectors.get(&agent.id, platform).is_some(),
        keys: key_views(persona, platform, env),
        withheld,
    }
}

fn platform_of(params: &HashMap<String, String>) -> Result<Platform, ApiError> {
    let raw = params.get("platform").map(String::as_str).unwrap_or("");
    match raw.parse::<Platform>() {
        Ok(p) if p != Platform::Web => Ok(p),
        _ => Err(ApiError::bad_request(format!(
            "`{raw}` is not a platform to connect: discord, telegram or farcaster"
        ))),
    }
}

/// `PUT /api/agents/{agent}/platforms/{platform}`: checks the token with the platform,
/// keeps it in the secrets file, and (re)starts the connector.
pub async fn connect(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path(params): Path<HashMap<String, String>>,
    ApiJson(body): ApiJson<Connect>,
) -> Result<Json<Connected>, ApiError> {
    let platform = platform_of(&params)?;
    let persona = agent.mind().persona.clone();
    let values = values_of(platform, &body)?;
    let base = state.secrets.overlay(&state.config.env);
    writable(&state)?;
    env_wins(&persona, platform, &base)?;
    // The persona's secrets as they would be with the new values.
    let mut env = base.clone();
    for (key, value) in &values {
        match value {
            Some(v) => env.insert(stored_name(persona.id.as_str(), key), v.clone()),
            None => env.remove(&stored_name(persona.id.as_str(), key)),
        };
    }
    if let Some(w) = persona.withheld_on(platform, &env).first() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "endpoint_in_file",
            w.message(),
        ));
    }
    not_taken(&state, &agent, platform, &body.token, &env)?;
    let account = check(platform, &persona, &env).await?;
    let mut changes: Vec<(&str, Option<String>)> = values;
    if let troupe_connectors::AccountFacts::Discord { application_id, .. } = &account.facts
        && set_in_env(&persona, "DISCORD_APPLICATION_ID", &base).is_none()
    {
        changes.push(("DISCORD_APPLICATION_ID", Some(application_id.to_string())));
    }
    state
        .secrets
        .change(persona.id.as_str(), &changes)
        .map_err(write_error)?;
    tracing::info!(persona = %persona.id, %platform, "platform connected from the console");
    state.reconnect.restart(&agent.id).await;
    let env = state.secrets.overlay(&state.config.env);
    Ok(Json(Connected {
        account: AccountView::of(account),
        platform: view(&state, &agent, &persona, platform, &env),
    }))
}

/// `DELETE /api/agents/{agent}/platforms/{platform}`: removes what the console stored for
/// the platform and stops (or restarts) the connector.
pub async fn disconnect(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path(params): Path<HashMap<String, String>>,
) -> Result<Json<PlatformView>, ApiError> {
    let platform = platform_of(&params)?;
    let persona = agent.mind().persona.clone();
    let base = state.secrets.overlay(&state.config.env);
    env_wins(&persona, platform, &base)?;
    let id = persona.id.as_str();
    if !keys(platform).iter().any(|k| state.secrets.holds(id, k)) {
        let detail = match key_views(&persona, platform, &base).first() {
            Some(k) => format!(
                "the console stored nothing for {platform}; its {} comes from {}: remove it there",
                k.key, k.from
            ),
            None => format!("{platform} is not connected for `{}`", persona.id),
        };
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_stored", detail));
    }
    writable(&state)?;
    let changes: Vec<(&str, Option<String>)> = keys(platform).iter().map(|k| (*k, None)).collect();
    state.secrets.change(id, &changes).map_err(write_error)?;
    tracing::info!(persona = %persona.id, %platform, "platform disconnected from the console");
    state.reconnect.restart(&agent.id).await;
    let env = state.secrets.overlay(&state.config.env);
    Ok(Json(view(&state, &agent, &persona, platform, &env)))
}

/// The keys a `PUT` sets (or removes), checked for shape; never echoed.
fn values_of(
    platform: Platform,
    body: &Connect,
) -> Result<Vec<(&'static str, Option<String>)>, ApiError> {
    let token = body.token.trim();
    if token.is_empty() || token.len() > 512 || token.chars().any(char::is_whitespace) {
        return Err(ApiError::bad_request(
            "`token` is the token as the platform gave it: 1 to 512 characters, no spaces",
        ));
    }
    let token = Some(token.to_string());
    Ok(match platform {
        Platform::Discord => vec![("DISCORD_API_TOKEN", token)],
        Platform::Telegram => vec![("TELEGRAM_BOT_TOKEN", token)],
        _ => {
            let fid = match &body.fid {
                Some(serde_json::Value::Number(n)) => n.as_u64(),
                Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
                _ => None,
            }
            .filter(|f| *f > 0)
            .ok_or_else(|| {
                ApiError::bad_request("`fid` is the Farcaster account's id, a positive number")
            })?;
            let signer = body
                .signer_uuid
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty());
            if signer.is_some_and(|s| {
                s.len() > 64 || !s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            }) {
                return Err(ApiError::bad_request("`signerUuid` is a UUID"));
            }
            vec![
                ("FARCASTER_NEYNAR_API_KEY", token),
                ("FARCASTER_FID", Some(fid.to_string())),
                ("FARCASTER_NEYNAR_SIGNER_UUID", signer.map(str::to_string)),
            ]
        }
    })
}

fn writable(state: &AppState) -> Result<(), ApiError> {
    match state.secrets.refused() {
        Some(why) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "secrets_file_refused",
            why,
        )),
        None => Ok(()),
    }
}

/// 409 when the environment sets the platform's credential for this persona: it wins
/// over anything the console could store.
fn env_wins(persona: &Persona, platform: Platform, env: &Env) -> Result<(), ApiError> {
    let Some(key) = credential_key(platform) else {
        return Ok(());
    };
    match set_in_env(persona, key, env) {
        Some(from) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "set_in_environment",
            format!(
                "{key} for `{}` comes from the {from}, which wins over the console: change \
                 or unset it there",
                persona.id
            ),
        )),
        None => Ok(()),
    }
}

/// 409 when another persona already uses this bot: one bot account serves one persona
/// (personas that share a bot, each saying so, excepted).
fn not_taken(
    state: &AppState,
    agent: &Agent,
    platform: Platform,
    token: &str,
    env: &Env,
) -> Result<(), ApiError> {
    let Some(key) = credential_key(platform) else {
        return Ok(());
    };
    let persona = &agent.mind().persona;
    for other in state.agents.all() {
        if other.id == agent.id {
            continue;
        }
        let mind = other.mind();
        if mind.persona.secret(key, env).as_deref() == Some(token.trim())
            && !persona.may_share_bot_with(&mind.persona, platform)
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "token_in_use",
                format!(
                    "the persona `{}` already uses this {platform} account; one bot serves one \
                     persona",
                    other.id
                ),
            ));
        }
    }
    Ok(())
}

/// Asks the platform whose account the new values are, through the persona's own
/// base-URL settings.
async fn check(
    platform: Platform,
    persona: &Persona,
    env: &Env,
) -> Result<troupe_connectors::Account, ApiError> {
    let lookup_persona = persona.clone();
    let lookup_env = env.clone();
    let lookup = move |key: &str| lookup_persona.secret(key, &lookup_env);
    let checked = match platform {
        Platform::Discord => troupe_connectors::discord::check_token(&lookup).await,
        Platform::Telegram => troupe_connectors::telegram::check_token(&lookup).await,
        _ => troupe_connectors::farcaster::check_account(&lookup).await,
    };
    checked.map_err(|e| match e {
        CheckError::Malformed(why) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "not_a_token", why)
        }
        CheckError::Refused(why) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "token_refused", why)
        }
        CheckError::Unreachable(why) => {
            ApiError::new(StatusCode::BAD_GATEWAY, "platform_unreachable", why)
        }
    })
}

fn write_error(e: crate::secrets_file::WriteError) -> ApiError {
    match e {
        crate::secrets_file::WriteError::Refused(why) => {
            ApiError::new(StatusCode::CONFLICT, "secrets_file_refused", why)
        }
        other => {
            tracing::error!("{other}");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "secrets_file_unwritable",
                "cannot write the secrets file (TROUPE_SECRETS_FILE); the gateway's log says why",
            )
        }
    }
}
