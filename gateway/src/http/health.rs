//! Liveness and readiness. `/healthz` answers as long as the process serves HTTP;
//! `/readyz` checks the database, the bus and every connector, and says which one failed;
//! a connector whose receiver another replica leads reports `standby` and counts as ready.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};
use std::time::Duration;

use super::AppState;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    crate::metrics::bus_depth(state.ingress.bus().depth());
    let mut ready = true;
    let database = match state.store.ping().await {
        Ok(()) => json!({ "status": "ok", "backend": state.store.backend() }),
        Err(e) => {
            ready = false;
            json!({ "status": "error", "detail": e.to_string() })
        }
    };
    let bus = match state.ingress.bus().health().await {
        Ok(()) => json!({
            "status": "ok",
            "kind": state.ingress.bus().describe(),
            "depth": state.ingress.bus().depth(),
        }),
        Err(e) => {
            ready = false;
            json!({
                "status": "error",
                "kind": state.ingress.bus().describe(),
                "detail": e.to_string(),
            })
        }
    };
    let mut connectors = Map::new();
    // A receiver that another replica leads is healthy here too: this replica still sends
    // through it, and takes over when the leader goes.
    let roles = state.elector.connector_roles();
    for (agent, connector) in state.outbox.connectors().all() {
        let name = format!("{agent}/{}", connector.platform());
        let standby = roles.get(&name) == Some(&crate::leader::Role::Standby);
        let status =
            match tokio::time::timeout(Duration::from_secs(5), connector.healthcheck()).await {
                Ok(Ok(())) if standby => json!({ "status": "standby" }),
                Ok(Ok(())) => json!({ "status": "ok" }),
                Ok(Err(e)) => {
                    ready = false;
                    json!({ "status": "error", "detail": e.to_string() })
                }
                Err(_) => {
                    ready = false;
                    json!({ "status": "error", "detail": "health check timed out" })
                }
            };
        connectors.insert(name, status);
    }
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "database": database,
        "bus": bus,
        "connectors": Value::Object(connectors),
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

/// `GET /metrics`: every series in the Prometheus text format.
pub async fn metrics() -> impl IntoResponse {
    let Some(handle) = crate::metrics::install() else {
        return super::error::ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "metrics are not available in this process",
        )
        .into_response();
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        handle.render(),
    )
        .into_response()
}
