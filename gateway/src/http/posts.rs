//! `GET/POST /api/agents/{agent}/posts` and `DELETE /api/agents/{agent}/posts/{id}`: a
//! persona's post schedules, their next run, and its recent posts (sent, kept in dry run,
//! skipped and why); operators add and remove schedules here without editing files
//! (docs/posts.md). Schedules from the character file or the environment are listed and
//! can only be changed there: a `DELETE` of one is refused with a 409 saying where.
//!
//! Policy (docs/security.md): behind `TROUPE_API_TOKEN` like every `/api` route; a schedule
//! posts only through the persona's own connectors, to a room id on a platform it runs on,
//! within its budgets and the room's mute. The body is a schedule (`posts::schedule::Spec`),
//! checked whole before anything is stored; at most 50 API schedules per persona.
//!
//! Drafts (issue 47): `GET …/posts/drafts`, `PUT …/posts/drafts/{id}` (`{text}`: the edit,
//! markers removed, within the schedule's length), `POST …/posts/drafts/{id}/approve` and
//! `…/reject`; a draft no longer waiting (approved, rejected, expired) is a 409. Operator
//! only: a scoped token reaches none of these routes.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::extract::AgentPath;
use crate::drafts;
use crate::posts::schedule::Spec;
use crate::posts::{AddError, Removed};
use crate::storage::{Decided, Draft, PostRun, RecentRuns, StoredSchedule};

/// Recent runs listed.
const RECENT: i64 = 50;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostsAnswer {
    schedules: Vec<StoredSchedule>,
    recent: Vec<PostRun>,
}

pub async fn list(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
) -> Result<Json<PostsAnswer>, ApiError> {
    let schedules = state.store.posts_schedules(&agent.id).await?;
    let recent = state
        .store
        .posts_recent(&agent.id, RECENT, RecentRuns::All)
        .await?;
    Ok(Json(PostsAnswer { schedules, recent }))
}

pub async fn add(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    ApiJson(spec): ApiJson<Spec>,
) -> Result<(StatusCode, Json<StoredSchedule>), ApiError> {
    match state.posts.add(&agent.mind().persona, spec).await {
        Ok(stored) => Ok((StatusCode::CREATED, Json(stored))),
        Err(AddError::Invalid(e)) => Err(ApiError::bad_request(e.to_string())),
        Err(e @ AddError::TooMany) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "too_many_schedules",
            e.to_string(),
        )),
        Err(AddError::Storage(e)) => Err(e.into()),
    }
}

pub async fn remove(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if id.len() > 100 {
        return Err(ApiError::not_found("no schedule with that id"));
    }
    match state.posts.remove(&agent.id, &id).await {
        Ok(Removed::Gone) => Ok(StatusCode::NO_CONTENT),
        Ok(Removed::NotFound) => Err(ApiError::not_found(format!("no schedule `{id}`"))),
        Ok(Removed::NotFromApi(source)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_from_api",
            format!(
                "schedule `{id}` comes from the {}; change it there",
                match source {
                    crate::storage::ScheduleSource::File =>
                        "character file (settings.troupe.posts)",
                    _ => "persona's settings (ENABLE_POST)",
                }
            ),
        )),
        Err(AddError::Storage(e)) => Err(e.into()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// `GET /api/agents/{agent}/posts/drafts`: the waiting drafts, then the latest decided.
#[derive(Debug, Serialize)]
pub struct DraftsAnswer {
    drafts: Vec<Draft>,
}

pub async fn list_drafts(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
) -> Result<Json<DraftsAnswer>, ApiError> {
    let now = crate::clock::now_ms();
    let drafts = (state.store)
        .drafts(&agent.id, now, drafts::DECIDED_LISTED)
        .await?;
    Ok(Json(DraftsAnswer { drafts }))
}

/// The body of `PUT …/posts/drafts/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    text: String,
}

/// A draft's id in the path: a number.
fn draft_id(id: &str) -> Result<i64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::not_found(format!("no draft `{id}`")))
}

/// 200 with the draft as it is now, 404, or 409 saying why it can no longer change.
async fn answer(
    state: &AppState,
    agent: &troupe_connectors::AgentId,
    id: i64,
    decided: Decided,
) -> Result<Json<Draft>, ApiError> {
    match decided {
        Decided::Done(_) => match state.store.draft(agent, id).await? {
            Some(d) => Ok(Json(d)),
            None => Err(ApiError::not_found(format!("no draft `{id}`"))),
        },
        Decided::NotFound => Err(ApiError::not_found(format!("no draft `{id}`"))),
        Decided::Conflict(now) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "draft_not_waiting",
            format!(
                "draft {id} is {}; it can no longer be approved, edited or rejected",
                serde_json::to_value(now)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ),
        )),
    }
}

pub async fn edit_draft(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path((_, id)): Path<(String, String)>,
    ApiJson(edit): ApiJson<Edit>,
) -> Result<Json<Draft>, ApiError> {
    let id = draft_id(&id)?;
    let Some(draft) = state.store.draft(&agent.id, id).await? else {
        return Err(ApiError::not_found(format!("no draft `{id}`")));
    };
    let max = drafts::limit_of(&state.store, &agent.id, &draft)
        .await
        .map_err(ApiError::internal)?;
    let text =
        drafts::checked_edit(&edit.text, max).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = crate::clock::now_ms();
    let decided = state.store.draft_edit(&agent.id, id, &text, now).await?;
    answer(&state, &agent.id, id, decided).await
}

pub async fn approve_draft(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Draft>, ApiError> {
    let id = draft_id(&id)?;
    let decided = (state.posts)
        .approve_draft(&agent.id, id, "api")
        .await
        .map_err(ApiError::internal)?;
    answer(&state, &agent.id, id, decided).await
}

pub async fn reject_draft(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Draft>, ApiError> {
    let id = draft_id(&id)?;
    let now = crate::clock::now_ms();
    let decided = state.store.draft_reject(&agent.id, id, "api", now).await?;
    answer(&state, &agent.id, id, decided).await
}
