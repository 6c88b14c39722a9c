//! Liveness and readiness. `/healthz` answers as long as the process serves HTTP;
//! `/readyz` checks the database, the bus and every connector, and says which one failed;
//! a connector whose receiver another replica leads reports `standby` and counts as ready.
//! A connector whose receive loop here has failed, waits to restart after a panic, or (for
//! a poller) has not heard from its platform within `TROUPE_RECEIVE_STALE_SECS` is an
//! `error` with the reason, whatever its credentials check says (issue 30, finding 11).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

use super::AppState;
use crate::storage::Backend;

/// `GET /healthz`.
#[derive(Debug, Serialize)]
pub struct Alive {
    status: &'static str,
}

pub async fn healthz() -> Json<Alive> {
    Json(Alive { status: "ok" })
}

/// `GET /readyz`: `ready` or `not_ready`, and each dependency's check.
#[derive(Debug, Serialize)]
pub struct Readiness {
    status: &'static str,
    database: Check,
    bus: Check,
    /// By `agent/platform`.
    connectors: BTreeMap<String, Check>,
    /// How far this replica's keyword index has followed the database (informative: a
    /// lagging or rebuilding index still answers, so it does not make the replica unready).
    #[serde(rename = "knowledgeIndex")]
    knowledge_index: crate::knowledge::IndexStatus,
    /// The vector index's path (`pgvector` or `in-process`) and catch-up; absent without an
    /// embedding model.
    #[serde(rename = "vectorIndex", skip_serializing_if = "Option::is_none")]
    vector_index: Option<crate::knowledge::VectorStatus>,
}

/// One dependency's check: `ok`, `standby` or `error` with a `detail`, and what it is.
#[derive(Debug, Default, Serialize)]
pub struct Check {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<Backend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depth: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

impl Check {
    fn status(status: &'static str) -> Self {
        Check {
            status,
            ..Check::default()
        }
    }

    fn error(detail: impl ToString) -> Self {
        Check {
            detail: Some(detail.to_string()),
            ..Check::status("error")
        }
    }

    fn is_ok(&self) -> bool {
        self.status != "error"
    }
}

pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let bus = state.ingress.bus();
    crate::metrics::bus_depth(bus.depth());
    let database = match state.store.ping().await {
        Ok(()) => Check {
            backend: Some(state.store.backend()),
            ..Check::status("ok")
        },
        Err(e) => Check::error(e),
    };
    let bus = match bus.health().await {
        Ok(()) => Check {
            kind: Some(bus.describe()),
            depth: Some(bus.depth()),
            ..Check::status("ok")
        },
        Err(e) => Check {
            kind: Some(bus.describe()),
            ..Check::error(e)
        },
    };
    let mut connectors = BTreeMap::new();
    // A receiver that another replica leads is healthy here too: this replica still sends
    // through it, and takes over when the leader goes.
    let roles = state.elector.connector_roles();
    for (agent, connector) in state.connectors.all() {
        let name = format!("{agent}/{}", connector.platform());
        let standby = roles.get(&name) == Some(&crate::leader::Role::Standby);
        let problem = (!standby)
            .then(|| receive_problem(&state, &name, connector.as_ref()))
            .flatten();
        let check = match problem {
            Some(problem) => Check::error(problem),
            None => {
                match tokio::time::timeout(Duration::from_secs(5), connector.healthcheck()).await {
                    Ok(Ok(())) if standby => Check::status("standby"),
                    Ok(Ok(())) => Check::status("ok"),
                    Ok(Err(e)) => Check::error(e),
                    Err(_) => Check::error("health check timed out"),
                }
            }
        };
        connectors.insert(name, check);
    }
    let ready = database.is_ok() && bus.is_ok() && connectors.values().all(Check::is_ok);
    let body = Readiness {
        status: if ready { "ready" } else { "not_ready" },
        database,
        bus,
        connectors,
        knowledge_index: state.knowledge.index_status(),
        vector_index: state.knowledge.vector_status(),
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

/// Why the receive loop(s) of connector `name` make this replica not ready, if they do:
/// one failed or restarting after a panic, or a poller quiet for too long.
fn receive_problem(
    state: &AppState,
    name: &str,
    connector: &dyn troupe_connectors::Connector,
) -> Option<String> {
    if let Some(problem) = state
        .receivers
        .of(name)
        .iter()
        .find_map(|status| status.problem())
    {
        return Some(problem);
    }
    let limit = state.config.receive.stale_after;
    connector
        .quiet_for()
        .filter(|quiet| *quiet > limit)
        .map(|quiet| {
            format!(
                "the receive loop has had no answer from {} for {}s (TROUPE_RECEIVE_STALE_SECS={})",
                connector.platform(),
                quiet.as_secs(),
                limit.as_secs()
            )
        })
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
