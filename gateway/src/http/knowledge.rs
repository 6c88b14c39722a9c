//! `/api/agents/{agent}/documents` and `/api/agents/{agent}/knowledge/search`: uploading,
//! listing and deleting an agent's documents, and searching them as the prompt would.
//!
//! Uploads are multipart (`file`, repeatable up to `TROUPE_KNOWLEDGE_MAX_FILES`, and an
//! optional `roomId` before them). Each file is read and refused as soon as it passes the
//! per-file limit, then ingested before the next is read, so an upload holds at most one
//! file's worth of memory. The work
//! itself is `knowledge::Knowledge`'s; this module only maps requests and errors.

use axum::Json;
use axum::extract::multipart::{Field, MultipartError, MultipartRejection};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use troupe_connectors::{Platform, RoomId, RoomKey};

use super::AppState;
use super::error::ApiError;
use crate::agent::Agent;
use crate::knowledge::{Knowledge, KnowledgeError};

impl From<KnowledgeError> for ApiError {
    fn from(e: KnowledgeError) -> Self {
        match e {
            KnowledgeError::TooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                e.to_string(),
            ),
            KnowledgeError::Unsupported(why) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                why,
            ),
            KnowledgeError::Unreadable(why) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unreadable_document", why)
            }
            KnowledgeError::NotFound(why) => ApiError::not_found(why),
            KnowledgeError::Embedding(why) => {
                tracing::warn!(error = %why, "embedding failed while serving a request");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "embedding_failed",
                    "the embedding API failed; the gateway's log has the details",
                )
            }
            KnowledgeError::Storage(e) => ApiError::internal(e),
        }
    }
}

fn knowledge(state: &AppState) -> Result<&Knowledge, ApiError> {
    Ok(&state.knowledge)
}

fn find(state: &AppState, agent: &str) -> Result<Arc<Agent>, ApiError> {
    state.agents.find(agent).ok_or_else(|| {
        ApiError::not_found(format!(
            "no persona with id or name `{agent}`; GET /api/agents lists them"
        ))
    })
}

/// A `roomId` as the API takes it: `platform:room` (`telegram:-100123`), or a bare id for
/// the Web platform, as `POST /messages` uses it (`r1` is `web:r1`).
fn room_key(room: &str) -> Result<String, ApiError> {
    let room = room.trim();
    if room.is_empty() || room.len() > 200 {
        return Err(ApiError::bad_request(
            "`roomId` must be 1 to 200 characters: `platform:room`, or a room of the HTTP API",
        ));
    }
    if let Some((platform, id)) = room.split_once(':')
        && let Ok(platform) = platform.parse::<Platform>()
    {
        return Ok(RoomKey::new(platform, RoomId::new(id)).to_string());
    }
    Ok(RoomKey::new(Platform::Web, RoomId::new(room)).to_string())
}

/// A query string that does not parse (`limit=abc`), as a JSON 400.
fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request(e.body_text())
}

/// A multipart failure as the client should see it: over the body limit is 413.
fn multipart_error(e: MultipartError, limit: usize) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the upload is larger than this gateway accepts ({limit} bytes per document, \
                 TROUPE_KNOWLEDGE_MAX_FILE_BYTES)"
            ),
        )
    } else {
        ApiError::bad_request(format!(
            "the multipart body could not be read: {}",
            e.body_text()
        ))
    }
}

/// Reads one file field, refusing it once it is over `limit` bytes.
async fn read_limited(
    field: &mut Field<'_>,
    name: &str,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    while let Some(piece) = field.chunk().await.map_err(|e| multipart_error(e, limit))? {
        if bytes.len() + piece.len() > limit {
            return Err(KnowledgeError::TooLarge {
                file: name.to_string(),
                bytes: bytes.len() + piece.len(),
                limit,
            }
            .into());
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

/// `POST /api/agents/{agent}/documents`: multipart `file` (one or more) and `roomId`.
/// Answers 201 with `{documents: [{id, source, chunks, duplicate, roomId}]}` and, for the
/// first file, the same fields at the top level; 200 when every file was a duplicate.
pub async fn upload(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "{}: send the document as multipart/form-data with a `file` field",
            e.body_text()
        ))
    })?;
    let agent = find(&state, &agent)?;
    let knowledge = knowledge(&state)?;
    let settings = knowledge.settings();
    let limit = settings.max_file_bytes;
    // Each file is ingested as soon as it has been read, so memory holds one file at a
    // time; the room must therefore come first.
    let mut room: Option<String> = None;
    let mut documents: Vec<Value> = Vec::new();
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(e, limit))?
    {
        match field.name().unwrap_or("") {
            "roomId" if !documents.is_empty() => {
                return Err(ApiError::bad_request(
                    "`roomId` must come before the `file` fields in the multipart body",
                ));
            }
            "roomId" => {
                let text = field.text().await.map_err(|e| multipart_error(e, limit))?;
                room = Some(room_key(&text)?);
            }
            "file" => {
                if documents.len() == settings.max_files_per_request {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_many_files",
                        format!(
                            "at most {} files per request (TROUPE_KNOWLEDGE_MAX_FILES)",
                            settings.max_files_per_request
                        ),
                    ));
                }
                let name = field
                    .file_name()
                    .map(str::to_string)
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| format!("upload-{}", documents.len() + 1));
                let content_type = field.content_type().map(str::to_string);
                let bytes = read_limited(&mut field, &name, limit).await?;
                let done = knowledge
                    .ingest(
                        &agent.id,
                        room.as_deref(),
                        &name,
                        content_type.as_deref(),
                        &bytes,
                    )
                    .await?;
                documents.push(json!({
                    "id": done.document_id,
                    "source": name,
                    "chunks": done.chunks,
                    "duplicate": done.duplicate,
                    "roomId": room,
                }));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown multipart field `{other}`: send the document as `file` and, \
                     optionally before it, the room as `roomId`"
                )));
            }
        }
    }
    if documents.is_empty() {
        return Err(ApiError::bad_request(
            "no `file` field: send the document as multipart/form-data with a `file` field",
        ));
    }
    let all_duplicates = documents.iter().all(|d| d["duplicate"] == json!(true));
    let mut body = documents[0].clone();
    body["documents"] = Value::Array(documents);
    let status = if all_duplicates {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    room_id: Option<String>,
}

/// `GET /api/agents/{agent}/documents[?roomId=]`.
pub async fn list(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let agent = find(&state, &agent)?;
    let room = query.room_id.as_deref().map(room_key).transpose()?;
    let docs = knowledge(&state)?
        .documents(&agent.id, room.as_deref().map(Some))
        .await?;
    Ok(Json(json!({ "documents": docs })))
}

/// `DELETE /api/agents/{agent}/documents/{id}`: 204, or 404 when unknown.
pub async fn delete(
    State(state): State<AppState>,
    Path((agent, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let agent = find(&state, &agent)?;
    knowledge(&state)?.delete(&agent.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchQuery {
    q: Option<String>,
    room_id: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/agents/{agent}/knowledge/search?q=&roomId=&limit=`: the chunks a prompt in that
/// room would get, with their scores and sources (limit default `TROUPE_KNOWLEDGE_TOP_K`,
/// at most 100).
pub async fn search(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    query: Result<Query<SearchQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let agent = find(&state, &agent)?;
    let knowledge = knowledge(&state)?;
    let q = query
        .q
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("`q` is required: the text to search for"))?;
    if q.chars().count() > state.config.limits.max_message_chars {
        return Err(ApiError::bad_request(format!(
            "`q` is longer than {} characters",
            state.config.limits.max_message_chars
        )));
    }
    let room = query.room_id.as_deref().map(room_key).transpose()?;
    let limit = query
        .limit
        .unwrap_or(knowledge.settings().top_k.max(1))
        .clamp(1, 100);
    let hits = knowledge
        .search(&agent.id, room.as_deref(), &q, limit)
        .await?;
    Ok(Json(json!({ "query": q, "roomId": room, "results": hits })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn room_ids_parse_like_the_messages_route() {
        assert_eq!(super::room_key("r1").unwrap(), "web:r1");
        assert_eq!(super::room_key("telegram:-100").unwrap(), "telegram:-100");
        assert!(super::room_key(" ").is_err());
    }
}
