//! `GET /api/agents/{agent}/usage?by=room|user|day&since=YYYY-MM-DD[&roomId=&userId=]`:
//! what a persona's model calls used and cost, from the daily rollups; with `roomId` (and
//! `userId`), also what that room and user used today and what their budgets have left
//! (docs/spend.md, docs/api.md).

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use troupe_connectors::UserId;

use super::AppState;
use super::error::ApiError;
use super::extract::{AgentPath, room_param};
use crate::spend::report::{self, Report};
use crate::spend::{PersonaToday, Today};

/// The query, as text: each field is parsed here so a bad one gets the API's error shape.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageQuery {
    by: Option<String>,
    since: Option<String>,
    room_id: Option<String>,
    user_id: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct UsageAnswer {
    #[serde(flatten)]
    report: Report,
    /// With `roomId`: today's standing of that room and user.
    #[serde(skip_serializing_if = "Option::is_none")]
    today: Option<Today>,
    /// The persona's standing today and this month, with what its budgets have left.
    #[serde(skip_serializing_if = "Option::is_none")]
    persona: Option<PersonaToday>,
}

/// The longest `userId` accepted (as on the messages route).
const MAX_USER_ID: usize = 200;

pub async fn usage(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Query(query): Query<UsageQuery>,
) -> Result<Json<UsageAnswer>, ApiError> {
    let by =
        report::parse_by(query.by.as_deref().unwrap_or("day")).map_err(ApiError::bad_request)?;
    let today = crate::spend::clock::day_of(crate::clock::now_ms());
    let since =
        report::parse_since(query.since.as_deref(), today).map_err(ApiError::bad_request)?;
    let report = report::report(&state.store, &agent.id, by, since).await?;
    let today = match (&query.room_id, agent.meter()) {
        (Some(room), Some(meter)) => {
            let room = room_param("roomId", room)?;
            let user = query
                .user_id
                .as_deref()
                .unwrap_or(crate::web::ANONYMOUS_USER);
            if user.is_empty() || user.chars().count() > MAX_USER_ID {
                return Err(ApiError::bad_request(format!(
                    "`userId` must be 1 to {MAX_USER_ID} characters"
                )));
            }
            let platform = room.platform;
            Some(meter.today(&room, platform, &UserId::new(user)).await?)
        }
        _ => None,
    };
    let persona = match agent.meter() {
        Some(meter) => Some(meter.persona_today().await?),
        None => None,
    };
    Ok(Json(UsageAnswer {
        report,
        today,
        persona,
    }))
}
