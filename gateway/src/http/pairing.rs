//! `GET /api/pairing`, `POST /api/pairing/approve` and `DELETE /api/pairing/{platform}/{user}`
//! (issue 44, docs/access.md): the codes waiting and the people approved, approving a code,
//! and taking an approval back.
//!
//! Policy (docs/security.md): the operator's token reaches every persona's; a scoped token
//! only its own personas' (and not with `readOnly` to approve or revoke). A wrong code
//! counts against the caller's lockout (five in ten minutes lock approval for ten), and
//! the answer to a wrong code and to an expired one is the same 404.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use troupe_connectors::{AgentId, Platform};

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiJson};
use crate::access::{AskingRoom, approve};
use crate::storage::{Approval, Approved, PendingCode};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PairingAnswer {
    pending: Vec<PendingCode>,
    approved: Vec<Approved>,
    /// Group rooms refused lately (operator only).
    asking: Vec<AskingRoom>,
}

/// The personas a caller reaches: `None` for every one (the operator).
fn reached(state: &AppState, caller: &Caller) -> Option<Vec<AgentId>> {
    match caller {
        Caller::Operator => None,
        Caller::Scoped(_) => Some(
            state
                .agents
                .all()
                .into_iter()
                .filter(|a| caller.reaches(&state.agents, a))
                .map(|a| a.id.clone())
                .collect(),
        ),
    }
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<PairingAnswer>, ApiError> {
    let now = state.access.now_ms();
    let (mut pending, mut approved) = state.store.access_list(None, now).await?;
    let reached = reached(&state, &caller);
    if let Some(ids) = &reached {
        pending.retain(|p| ids.contains(&p.agent_id));
        approved.retain(|a| ids.contains(&a.agent_id));
    }
    let asking = if reached.is_none() {
        state.access.asking_rooms()
    } else {
        Vec::new()
    };
    Ok(Json(PairingAnswer {
        pending,
        approved,
        asking,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    code: String,
    /// The persona whose code it is; needed by a token that reaches several.
    #[serde(default)]
    persona: Option<String>,
}

pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ApproveBody>,
) -> Result<Json<Approved>, ApiError> {
    let (agent, scope, by) = approver(&state, &caller, body.persona.as_deref())?;
    let now = state.access.now_ms();
    let approval = approve::approve(&state.store, &body.code, agent.as_ref(), &scope, &by, now)
        .await
        .map_err(ApiError::internal)?;
    match approval {
        Approval::Approved(a) => Ok(Json(a)),
        Approval::Refused => Err(ApiError::not_found("no pending code matches")),
        locked @ Approval::LockedOut { .. } => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "locked_out",
            approve::answer(&locked, now),
        )),
    }
}

/// Whose codes a caller approves, its lockout scope and its name.
fn approver(
    state: &AppState,
    caller: &Caller,
    persona: Option<&str>,
) -> Result<(Option<AgentId>, String, String), ApiError> {
    let named = match persona {
        Some(p) => Some(
            state
                .agents
                .find(p)
                .filter(|a| caller.reaches(&state.agents, a))
                .map(|a| a.id.clone())
                .ok_or_else(|| {
                    ApiError::bad_request(format!("no persona `{p}` for this caller"))
                })?,
        ),
        None => None,
    };
    match caller {
        Caller::Operator => Ok((named, "api".into(), "api".into())),
        Caller::Scoped(t) => {
            let mine = reached(state, caller).unwrap_or_default();
            let agent = match (named, mine.as_slice()) {
                (Some(a), _) => a,
                (None, [one]) => one.clone(),
                _ => {
                    return Err(ApiError::bad_request(
                        "this token reaches several personas: name one as `persona`",
                    ));
                }
            };
            Ok((
                Some(agent),
                format!("api:{}", t.name),
                format!("token:{}", t.name),
            ))
        }
    }
}

pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((platform, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let platform: Platform = platform
        .parse()
        .map_err(|_| ApiError::bad_request(format!("unknown platform `{platform}`")))?;
    if user.is_empty() || user.len() > 200 {
        return Err(ApiError::bad_request("a user id of 1 to 200 characters"));
    }
    let subject = format!("{platform}:{user}");
    let taken = match reached(&state, &caller) {
        None => state.store.access_revoke(None, &subject).await?,
        Some(ids) => {
            let mut taken = 0;
            for id in &ids {
                taken += state.store.access_revoke(Some(id), &subject).await?;
            }
            taken
        }
    };
    if taken == 0 {
        return Err(ApiError::not_found(format!("{subject} is not approved")));
    }
    tracing::info!(%subject, "approval revoked");
    Ok(StatusCode::NO_CONTENT)
}
