//! The HTTP API: one router, one state, one error type.
//!
//! Routes (stable; see docs and DESIGN.md): `/healthz`, `/readyz`, and under `/api` the
//! agents, the direct conversation with them, and their rooms and memories. When
//! `TROUPE_API_TOKEN` is set, every mutating request needs `Authorization: Bearer <token>`;
//! reads stay open so dashboards and probes need no secret.

mod agents;
pub mod error;
mod health;
mod knowledge;
mod webhooks;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use secrecy::ExposeSecret;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::agent::Agents;
use crate::config::Config;
use crate::ingress::Ingress;
use crate::knowledge::Knowledge;
use crate::outbox::Outbox;
use crate::storage::Store;
use error::ApiError;

/// What every handler may use.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub agents: Agents,
    pub ingress: Ingress,
    pub store: Store,
    pub outbox: Outbox,
    pub knowledge: Knowledge,
    /// Which receivers this replica leads, for `/readyz`.
    pub elector: crate::leader::Elector,
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/agents", get(agents::list))
        .route("/agents/{agent}", get(agents::get))
        .route("/agents/{agent}/messages", post(agents::post_message))
        .route("/agents/{agent}/rooms", get(agents::rooms))
        .route(
            "/agents/{agent}/rooms/{room}/memories",
            get(agents::memories),
        )
        .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes))
        .merge(knowledge_routes(&state))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));

    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics))
        .nest("/api", api)
        .route(
            "/webhooks/{platform}/{agent}",
            post(webhooks::receive)
                .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the request failed unexpectedly; the gateway's log has the details",
                )
                .into_response()
            },
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// The knowledge routes. Uploads get their own body limit: every file may be as large as
/// `TROUPE_KNOWLEDGE_MAX_FILE_BYTES`, plus room for the multipart framing.
fn knowledge_routes(state: &AppState) -> Router<AppState> {
    let k = &state.config.knowledge;
    let upload_limit = k
        .max_file_bytes
        .saturating_mul(k.max_files_per_request)
        .saturating_add(64 * 1024);
    Router::new()
        .route(
            "/agents/{agent}/documents",
            post(knowledge::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                .get(knowledge::list),
        )
        .route("/agents/{agent}/documents/{id}", delete(knowledge::delete))
        .route("/agents/{agent}/knowledge/search", get(knowledge::search))
}

async fn metrics(State(state): State<AppState>) -> Response {
    crate::metrics::bus_depth(state.ingress.bus().depth());
    health::metrics().await.into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see docs/api.md for the routes")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

/// Guards mutating requests with the API token, compared in constant time.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(token) = &state.config.api_token else {
        return next.run(request).await;
    };
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.as_bytes(), token.expose_secret().as_bytes()) {
        next.run(request).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this route needs `Authorization: Bearer <TROUPE_API_TOKEN>`",
        )
        .into_response()
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_comparison() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
    }
}
