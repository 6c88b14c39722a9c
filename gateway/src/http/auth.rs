//! Who is calling the API, and what they may reach (issue 30, finding 7; docs/api.md,
//! "Scoped tokens").
//!
//! - The operator's token (`TROUPE_API_TOKEN`) reaches everything. Without it the server
//!   binds loopback only, and every caller is the operator.
//! - A scoped token (`TROUPE_API_TOKENS_FILE`) lets a website talk to some personas without
//!   holding the operator's key. It reaches only [`scoped_access`]'s routes, of its own
//!   personas, and with `readOnly` only their reads. Everything else answers 403
//!   `forbidden`: the character editor, `/metrics`, room lists, documents, usage, other
//!   personas (whose names it is not told).
//! - A scoped token's rooms and users are its own: the room `r1` it names is `web:NAME:r1`,
//!   its user `u` is `NAME:u` ([`Caller::web_room`]), so two websites never read or write
//!   each other's rooms, and none reaches a platform's room.
//!
//! Tokens are compared in constant time, by their SHA-256 digests (so not even their
//! length shows), and never logged: a caller is named by its token's name only.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use troupe_connectors::{Platform, RoomId, RoomKey};

use super::AppState;
use super::error::ApiError;
use crate::config::{Config, ScopedToken};

/// Who made a request, as [`require_token`] found it; in the request's extensions for the
/// handlers and extractors behind it.
#[derive(Clone)]
pub enum Caller {
    /// `TROUPE_API_TOKEN`, or anyone when it is unset (the server then binds loopback only).
    Operator,
    Scoped(Arc<ScopedToken>),
}

impl Caller {
    /// The room a caller means by a Web room id: its own for a scoped token.
    pub fn web_room(&self, room: RoomId) -> RoomId {
        match self {
            Caller::Operator => room,
            Caller::Scoped(t) => RoomId::new(format!("{}:{}", t.name, room.as_str())),
        }
    }

    /// The user a caller means by a `userId`: its own for a scoped token.
    pub fn user(&self, user: String) -> String {
        match self {
            Caller::Operator => user,
            Caller::Scoped(t) => format!("{}:{user}", t.name),
        }
    }

    /// Whether this caller may reach `agent`: the operator every persona, a scoped token
    /// those it lists (by id or name).
    pub fn reaches(&self, agents: &crate::agent::Agents, agent: &crate::agent::Agent) -> bool {
        match self {
            Caller::Operator => true,
            Caller::Scoped(t) => t
                .personas
                .iter()
                .any(|p| agents.find(p).is_some_and(|a| a.id == agent.id)),
        }
    }

    /// The room a route's `{room}` names, as this caller may see it: a scoped token sees
    /// only its own rooms of the HTTP API.
    pub fn room(&self, key: RoomKey) -> Result<RoomKey, ApiError> {
        match self {
            Caller::Operator => Ok(key),
            Caller::Scoped(_) if key.platform == Platform::Web => {
                Ok(RoomKey::new(Platform::Web, self.web_room(key.room)))
            }
            Caller::Scoped(t) => Err(forbidden(format!(
                "the token `{}` reaches only its own rooms of the HTTP API (`r1`), not {key}",
                t.name
            ))),
        }
    }
}

/// Handlers and extractors behind [`require_token`] take the caller from here. A route
/// outside it has no caller: a routing mistake, answered as an internal error.
impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::internal("the route is not behind the API token check"))
    }
}

/// What a scoped token may do on one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// The routes a scoped token may call (the route as the router matched it, `/api` or
/// not), and whether each writes. Every other route is the operator's.
fn scoped_access(method: &Method, route: &str) -> Option<Access> {
    let route = route.strip_prefix("/api").unwrap_or(route);
    let read = method == Method::GET || method == Method::HEAD;
    match route {
        "/agents/{agent}" | "/agents/{agent}/rooms/{room}/memories" if read => Some(Access::Read),
        "/agents/{agent}/messages" if method == Method::POST => Some(Access::Write),
        // The persona is in the body or the path's `{model}`: the handler checks it
        // (`Caller::reaches`), and lists only the token's own.
        "/v1/models" | "/v1/models/{model}" if read => Some(Access::Read),
        "/v1/chat/completions" if method == Method::POST => Some(Access::Write),
        // Pairing (issue 44): the handler keeps a token to its own personas' codes.
        "/pairing" if read => Some(Access::Read),
        "/pairing/approve" if method == Method::POST => Some(Access::Write),
        "/pairing/{platform}/{user}" if method == Method::DELETE => Some(Access::Write),
        _ => None,
    }
}

/// Guards every request with a token, compared in constant time: the operator's reaches
/// everything, a scoped one its routes and personas only. Reads too: they show every
/// room's messages, facts and documents. The caller is left in the request's extensions.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let caller = match identify(&state.config, &parts) {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    if let Caller::Scoped(token) = &caller
        && let Err(e) = scoped_may(&state, token, &mut parts).await
    {
        return e.into_response();
    }
    parts.extensions.insert(caller);
    next.run(Request::from_parts(parts, body)).await
}

/// The caller its `Authorization: Bearer` header names; 401 when no token matches.
fn identify(config: &Config, parts: &Parts) -> Result<Caller, ApiError> {
    let Some(operator) = &config.api_token else {
        return Ok(Caller::Operator);
    };
    // The scheme is case-insensitive (RFC 9110, 11.1).
    let presented = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .unwrap_or("");
    let presented = digest(presented);
    // Every token is compared, so the time taken does not tell which one matched.
    let mut found = None;
    if same(&presented, &digest(operator.expose_secret())) {
        found = Some(Caller::Operator);
    }
    for token in &config.api_callers.tokens {
        if same(&presented, &digest(token.secret.expose_secret())) {
            found = Some(Caller::Scoped(Arc::new(token.clone())));
        }
    }
    found.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this route needs `Authorization: Bearer <TROUPE_API_TOKEN>` (or a scoped token \
             of TROUPE_API_TOKENS_FILE)",
        )
    })
}

/// Whether the scoped `token` may call this route: one of [`scoped_access`]'s, a read
/// unless it may write, and for one of its personas.
async fn scoped_may(
    state: &AppState,
    token: &ScopedToken,
    parts: &mut Parts,
) -> Result<(), ApiError> {
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let name = &token.name;
    let Some(access) = scoped_access(&parts.method, &route) else {
        return Err(forbidden(format!(
            "the token `{name}` may not call {} {}: a scoped token reaches only \
             GET /api/agents/{{agent}}, POST …/messages and GET …/rooms/{{room}}/memories \
             of its personas",
            parts.method,
            parts.uri.path()
        )));
    };
    if access == Access::Write && token.read_only {
        return Err(forbidden(format!(
            "the token `{name}` is read-only: it may not post messages or approve anyone"
        )));
    }
    if route.starts_with("/v1/") || route.starts_with("/api/pairing") {
        // The OpenAI-compatible routes name their persona as a model (`http::openai`);
        // pairing names none, and answers for the token's own personas (`http::pairing`).
        return Ok(());
    }
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let named = params
        .iter()
        .find(|(key, _)| *key == "agent")
        .map(|(_, value)| value.to_string())
        .unwrap_or_default();
    let caller = Caller::Scoped(Arc::new(token.clone()));
    let allowed = state
        .agents
        .find(&named)
        .is_some_and(|agent| caller.reaches(&state.agents, &agent));
    if allowed {
        Ok(())
    } else {
        // The same answer for a persona that does not exist: a token does not learn which
        // personas this gateway runs.
        Err(forbidden(format!(
            "the token `{name}` may not reach the persona `{named}`"
        )))
    }
}

fn forbidden(detail: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", detail)
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(same(&digest("abc"), &digest("abc")));
        assert!(!same(&digest("abc"), &digest("abd")));
        assert!(!same(&digest("abc"), &digest("abcd")));
    }

    #[test]
    fn scoped_tokens_reach_only_their_routes() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(
            scoped_access(&get, "/api/agents/{agent}"),
            Some(Access::Read)
        );
        assert_eq!(
            scoped_access(&get, "/api/agents/{agent}/rooms/{room}/memories"),
            Some(Access::Read)
        );
        assert_eq!(
            scoped_access(&post, "/api/agents/{agent}/messages"),
            Some(Access::Write)
        );
        // The OpenAI-compatible routes: the handler checks the persona (`Caller::reaches`).
        assert_eq!(scoped_access(&get, "/v1/models"), Some(Access::Read));
        assert_eq!(
            scoped_access(&get, "/v1/models/{model}"),
            Some(Access::Read)
        );
        assert_eq!(
            scoped_access(&post, "/v1/chat/completions"),
            Some(Access::Write)
        );
        for (method, route) in [
            (&get, "/api/agents"),
            (&get, "/metrics"),
            (&get, "/api/characters"),
            (&Method::PUT, "/api/characters/{file}"),
            (&post, "/api/characters/check"),
            (&get, "/api/agents/{agent}/rooms"),
            (&get, "/api/agents/{agent}/usage"),
            (&post, "/api/agents/{agent}/documents"),
            (&get, "/api/agents/{agent}/knowledge/search"),
            (&post, "/api/agents/{agent}/rooms/{room}/commands"),
            (&Method::DELETE, "/api/agents/{agent}/messages"),
            (&get, "/v1/chat/completions"),
            (&post, "/v1/models"),
        ] {
            assert_eq!(scoped_access(method, route), None, "{method} {route}");
        }
    }

    #[test]
    fn a_scoped_callers_rooms_and_users_are_its_own() {
        let token = ScopedToken {
            name: crate::config::TokenName::parse("shop").unwrap(),
            secret: "s".repeat(20).into(),
            personas: vec!["ada".into()],
            read_only: false,
        };
        let caller = Caller::Scoped(Arc::new(token));
        assert_eq!(caller.web_room(RoomId::new("r1")).as_str(), "shop:r1");
        assert_eq!(caller.user("u".into()), "shop:u");
        let key = caller.room(RoomKey::parse_lenient("r1").unwrap()).unwrap();
        assert_eq!(key.to_string(), "web:shop:r1");
        let err = caller
            .room(RoomKey::parse_lenient("telegram:5").unwrap())
            .unwrap_err();
        assert_eq!(err.status, StatusCode::FORBIDDEN);
        let operator = Caller::Operator;
        assert_eq!(operator.web_room(RoomId::new("r1")).as_str(), "r1");
    }
}
