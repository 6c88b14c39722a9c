//! The API's typed parameters: a route's `{agent}` resolved to the loaded persona, its
//! `{room}` and every `roomId` (query, body or multipart field) parsed into a [`RoomKey`].
//!
//! Handlers take these instead of strings, so a route cannot forget the lookup or parse a
//! room its own way, and every route answers a bad one with the same error. A `{room}` is
//! the room as its caller may see it: a scoped token's are its own ([`Caller::room`]).

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use serde::{Deserialize, Deserializer};
use std::sync::Arc;
use troupe_connectors::RoomKey;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::agent::Agent;

/// The persona a route's `{agent}` names, by id or by name (any case). Unknown: 404
/// `not_found`, with the loaded personas in the detail.
pub struct AgentPath(pub Arc<Agent>);

impl FromRequestParts<AppState> for AgentPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let named = path_param(parts, state, "agent").await?;
        state.agents.find(&named).map(AgentPath).ok_or_else(|| {
            let known: Vec<String> = state
                .agents
                .all()
                .iter()
                .map(|a| a.id.to_string())
                .collect();
            ApiError::not_found(format!(
                "no persona with id or name `{named}`; loaded: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }
}

/// A route's `{room}`: `platform:room` (`telegram:-1001234`), or a bare id for a room of
/// the HTTP API (`r1` is `web:r1`). Malformed: 400 `bad_request`. For a scoped token, `r1`
/// is its own `web:NAME:r1`, and another platform's room is 403 `forbidden`.
pub struct RoomPath(pub RoomKey);

impl FromRequestParts<AppState> for RoomPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let named = path_param(parts, state, "room").await?;
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.room(room_param("room", &named)?).map(RoomPath)
    }
}

/// A `roomId` as a person writes it ([`RoomKey::parse_lenient`]), as the API's error.
pub fn room_param(field: &str, raw: &str) -> Result<RoomKey, ApiError> {
    RoomKey::parse_lenient(raw).map_err(|e| ApiError::bad_request(format!("`{field}`: {e}")))
}

/// `#[serde(default, deserialize_with = "lenient_room")]` for an optional `roomId` in a
/// query string or a JSON body: parsed like [`room_param`], so `?roomId=r1` is `web:r1`.
pub fn lenient_room<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RoomKey>, D::Error> {
    let raw = Option::<String>::deserialize(d)?;
    raw.map(|r| RoomKey::parse_lenient(&r).map_err(serde::de::Error::custom))
        .transpose()
}

/// One named path parameter. The router only calls these handlers on routes that have it,
/// so a missing one is a routing mistake, reported as an internal error.
async fn path_param(parts: &mut Parts, state: &AppState, name: &str) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| ApiError::internal(format!("the route has no `{{{name}}}` parameter")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Q {
        #[serde(default, deserialize_with = "lenient_room")]
        room_id: Option<RoomKey>,
    }

    #[test]
    fn rooms_parse_with_or_without_platform() {
        let key = |s: &str| room_param("room", s).map(|k| k.to_string());
        assert_eq!(key("telegram:-100:7").unwrap(), "telegram:-100:7");
        assert_eq!(key("r1").unwrap(), "web:r1");
        assert_eq!(key("weird:thing").unwrap(), "web:weird:thing");
        let err = room_param("roomId", " ").unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(err.detail.starts_with("`roomId`: "), "{}", err.detail);
        assert!(room_param("room", &"x".repeat(RoomKey::MAX_LEN + 1)).is_err());
    }

    #[test]
    fn optional_room_ids_deserialize_leniently() {
        let q: Q = serde_json::from_str(r#"{"room_id": "r1"}"#).unwrap();
        assert_eq!(q.room_id.unwrap().to_string(), "web:r1");
        let q: Q = serde_json::from_str("{}").unwrap();
        assert!(q.room_id.is_none());
        assert!(serde_json::from_str::<Q>(r#"{"room_id": ""}"#).is_err());
    }
}
