//! `POST /webhooks/{platform}/{agent}`: platform webhooks (Telegram, Neynar).
//!
//! The route only finds the connector and hands it the raw request; the connector verifies
//! it (Telegram's secret token, Neynar's HMAC signature), so no API token is needed here.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use troupe_connectors::{Platform, WebhookRequest};

use super::AppState;
use super::error::ApiError;
use super::extract::AgentPath;

/// The path of a webhook; `{agent}` is [`AgentPath`]'s.
#[derive(serde::Deserialize)]
pub struct WebhookParams {
    platform: String,
}

pub async fn receive(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path(params): Path<WebhookParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let platform: Platform =
        params
            .platform
            .parse()
            .map_err(|e: troupe_connectors::model::UnknownPlatform| {
                ApiError::not_found(e.to_string())
            })?;
    let connector = state.connectors.get(&agent.id, platform).ok_or_else(|| {
        ApiError::not_found(format!(
            "persona `{}` runs no {platform} connector",
            agent.id
        ))
    })?;
    let request = WebhookRequest {
        headers: headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect(),
        body: body.to_vec(),
    };
    let reply = connector.webhook(request).await;
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Ok((
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        reply.body,
    )
        .into_response())
}
