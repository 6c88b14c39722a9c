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

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::extract::AgentPath;
use crate::posts::schedule::Spec;
use crate::posts::{AddError, Removed};
use crate::storage::{PostRun, RecentRuns, StoredSchedule};

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
