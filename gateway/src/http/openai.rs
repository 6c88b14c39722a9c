//! Personas as OpenAI-compatible models (issue 35, docs/openai.md): `GET /v1/models`,
//! `GET /v1/models/{model}` and `POST /v1/chat/completions`, so that any chat front end
//! or SDK that speaks OpenAI's API talks to a persona without a connector.
//!
//! A completion is a message of the Web platform, posted the way `POST
//! /api/agents/{agent}/messages` posts one (`Ingress::converse`): journaled, answered by the
//! persona's one agent in its room's turn, under its rate limits and budgets, recorded, and
//! answered once per `Idempotency-Key`. This module only translates: the request in
//! (`request`), the reply out (`response`), the errors into OpenAI's shape (`errors`).
//! Auth is the API's: `TROUPE_API_TOKEN`, or a scoped token, which sees and reaches only
//! its own personas (a persona it may not reach is an unknown model).

mod errors;
mod request;
mod response;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ApiJson};
use crate::agent::Agent;
use crate::ingress::Outcome;
use crate::outcome::{Origin, WhyNot};
use crate::provider::ProviderError;
use request::ChatRequest;
use response::{Reply, Usage};

/// The `/v1` routes, behind the API's token check and budget per caller, with OpenAI's
/// error shape.
pub(super) fn routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        .route(
            "/v1/chat/completions",
            post(chat_completions).layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes)),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            super::api_budget,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            super::auth::require_token,
        ))
        .layer(middleware::from_fn(errors::openai_errors))
}

/// A persona as an OpenAI model.
#[derive(Debug, Serialize)]
struct ModelView {
    id: String,
    object: &'static str,
    /// When the character file last changed, in seconds (0 when unknown).
    created: i64,
    owned_by: &'static str,
}

impl ModelView {
    fn of(agent: &Agent) -> Self {
        let created = std::fs::metadata(&agent.mind().persona.source)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        ModelView {
            id: agent.id.to_string(),
            object: "model",
            created,
            owned_by: "troupe",
        }
    }
}

#[derive(Debug, Serialize)]
struct ModelList {
    object: &'static str,
    data: Vec<ModelView>,
}

/// `GET /v1/models`: the personas this caller may reach.
async fn models(State(state): State<AppState>, caller: Caller) -> Json<ModelList> {
    let data = state
        .agents
        .all()
        .iter()
        .filter(|a| caller.reaches(&state.agents, a))
        .map(|a| ModelView::of(a))
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
}

/// `GET /v1/models/{model}`: one persona, by id or name.
async fn model(
    State(state): State<AppState>,
    caller: Caller,
    Path(named): Path<String>,
) -> Result<Json<ModelView>, ApiError> {
    persona(&state, &caller, &named).map(|a| Json(ModelView::of(&a)))
}

/// The persona `model` names (id or name) that this caller may reach; else OpenAI's 404
/// `model_not_found`, the same for one that exists but is not this token's.
fn persona(state: &AppState, caller: &Caller, named: &str) -> Result<Arc<Agent>, ApiError> {
    state
        .agents
        .find(named)
        .filter(|a| caller.reaches(&state.agents, a))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "model_not_found",
                format!(
                    "The model `{named}` does not exist: a model is a persona's id; \
                     GET /v1/models lists them"
                ),
            )
        })
}

/// `POST /v1/chat/completions`: the persona's answer to the conversation's last message.
async fn chat_completions(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let agent = persona(&state, &caller, &body.model)?;
    // Refused before journaling, as `POST …/messages` does.
    if let Some(reason) = agent.mind().provider.unavailable() {
        return Err(super::agents::provider_error(&ProviderError::Unconfigured(
            reason,
        )));
    }
    super::api_share_left(&agent).await?;
    let (stream, include_usage) = (body.stream, body.include_usage());
    let posted = request::posted(body, &headers, &caller, request::Limits::of(&state.config))?;
    tracing::debug!(stateful = posted.stateful, "chat completion");
    let message_id = posted.inbound.id.clone();
    let deadline = state.config.agent.model_timeout + Duration::from_secs(30);
    let reply = |text, usage, ignored| Reply {
        id: format!("chatcmpl-{message_id}"),
        model: agent.id.to_string(),
        created: crate::clock::now_ms() / 1000,
        text,
        usage,
        ignored,
    };
    if !stream {
        let answer = state
            .ingress
            .converse(&agent.id, posted.inbound, deadline)
            .await
            .map_err(super::agents::converse_error)?;
        let (text, usage, ignored) = answered(answer.outcome)?;
        return Ok(reply(text, usage, ignored).completion());
    }
    let (ingress, who) = (state.ingress.clone(), agent.id.clone());
    let inbound = posted.inbound;
    let converse = Box::pin(async move { ingress.converse(&who, inbound, deadline).await });
    match super::live::start(state.ingress.live(), &agent.id, &message_id, converse).await {
        super::live::Started::Done(answer) => {
            let answer = answer.map_err(super::agents::converse_error)?;
            let (text, usage, ignored) = answered(answer.outcome)?;
            Ok(reply(text, usage, ignored).stream(include_usage))
        }
        super::live::Started::Live(streaming) => {
            let chunks = response::Chunks {
                id: format!("chatcmpl-{message_id}"),
                model: agent.id.to_string(),
                created: crate::clock::now_ms() / 1000,
                include_usage,
            };
            let first = chunks.clone();
            let mut role_sent = false;
            let delta = move |piece: &str| {
                // The role goes with the first piece: a chunk stream opens with it.
                let mut frames = String::new();
                if !std::mem::replace(&mut role_sent, true) {
                    frames.push_str(&first.role());
                }
                frames.push_str(&first.content(piece));
                frames
            };
            Ok(streaming.respond(delta, move |answer, sent| live_end(&chunks, answer, sent)))
        }
    }
}

/// The end of a live stream: what is left of the reply after `sent`, the finish and usage;
/// or the error, in OpenAI's shape, when the turn failed after it began writing.
fn live_end(
    chunks: &response::Chunks,
    answer: Result<crate::ingress::Answer, crate::ingress::ConverseError>,
    sent: &str,
) -> Vec<String> {
    let outcome = answer
        .map_err(super::agents::converse_error)
        .and_then(|a| answered(a.outcome));
    match outcome {
        Ok((text, usage, _)) => {
            let mut frames = Vec::new();
            let left = super::live::rest(&text, sent);
            if !left.is_empty() {
                frames.push(chunks.content(left));
            }
            frames.extend(chunks.end(usage));
            frames
        }
        Err(e) => chunks.error(errors::openai_error_value(&e)),
    }
}

/// The reply's text and usage for the agent's outcome, or the error a client acts on. A
/// reply recorded before (a retried `Idempotency-Key`) reports no usage: it cost nothing
/// this time. A spend budget's refusal, with or without its notice, is a 429, as is a rate
/// limit; a persona that chose not to answer (a muted room) gives an empty answer and says
/// why in `x-troupe-ignored`.
fn answered(outcome: Outcome) -> Result<(String, Usage, Option<String>), ApiError> {
    match outcome {
        Outcome::Replied {
            origin: Origin::BudgetNotice,
            texts,
        } => Err(over_budget(texts.join("\n\n"))),
        Outcome::Ignored {
            reason: WhyNot::OverBudget,
        } => Err(over_budget(WhyNot::OverBudget.to_string())),
        Outcome::Replied { texts, origin } => {
            let usage = match origin {
                Origin::Model {
                    prompt_tokens,
                    completion_tokens,
                } => Usage::new(prompt_tokens, completion_tokens),
                _ => Usage::default(),
            };
            Ok((texts.join("\n\n"), usage, None))
        }
        Outcome::Ignored { reason } => {
            Ok((String::new(), Usage::default(), Some(reason.to_string())))
        }
        Outcome::RateLimited { scope } => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_exceeded",
            format!("too many messages (per-{scope} limit); wait a minute and try again"),
        )
        .retry_after(60)),
        Outcome::Failed { error } => Err(super::agents::handle_error(&error)),
        Outcome::GaveUp { reason } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "gave_up",
            reason,
        )),
    }
}

/// A spend budget refused the message: 429 until the next UTC day, with the persona's
/// notice as the message.
fn over_budget(notice: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_exhausted", notice)
        .retry_after(super::secs_to_utc_midnight())
}
