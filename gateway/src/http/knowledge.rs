//! `/api/agents/{agent}/documents` and `/api/agents/{agent}/knowledge/search`: uploading,
//! listing and deleting an agent's documents, and searching them as the prompt would.
//!
//! Uploads are multipart: `file`, repeatable up to `TROUPE_KNOWLEDGE_MAX_FILES`, and an
//! optional `roomId`, in any order. An upload is all or nothing: every field is read first,
//! each file spooled to a temporary file (refused as soon as it passes the per-file limit,
//! so memory never holds more than a piece of one file); then every file is read and
//! chunked by the sandboxed worker; only when all of them succeeded are they stored, and a
//! failure while storing removes the ones this request stored. The work itself is
//! `knowledge::Knowledge`'s; this module only maps requests and errors.

use axum::Json;
use axum::extract::multipart::{Field, MultipartError, MultipartRejection};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use troupe_connectors::{Platform, RoomId, RoomKey};

use super::AppState;
use super::error::ApiError;
use crate::agent::Agent;
use crate::knowledge::{Input, Knowledge, KnowledgeError, Origin};

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
            KnowledgeError::Busy(why) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", why)
            }
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
fn room_key(room: &str) -> Result<RoomKey, ApiError> {
    let room = room.trim();
    if room.is_empty() || room.len() > 200 {
        return Err(ApiError::bad_request(
            "`roomId` must be 1 to 200 characters: `platform:room`, or a room of the HTTP API",
        ));
    }
    if let Some((platform, id)) = room.split_once(':')
        && let Ok(platform) = platform.parse::<Platform>()
    {
        return Ok(RoomKey::new(platform, RoomId::new(id)));
    }
    Ok(RoomKey::new(Platform::Web, RoomId::new(room)))
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

/// One uploaded file, spooled to disk until the whole request has been read.
struct Spooled {
    name: String,
    content_type: Option<String>,
    /// Removed when dropped, whatever the outcome.
    file: tempfile::NamedTempFile,
}

/// Writes one file field to a temporary file, refusing it once it is over `limit` bytes.
async fn spool(field: &mut Field<'_>, name: &str, limit: usize) -> Result<Spooled, ApiError> {
    let file = tempfile::Builder::new()
        .prefix("troupe-upload-")
        .tempfile()
        .map_err(ApiError::internal)?;
    let mut out =
        tokio::fs::File::from_std(file.as_file().try_clone().map_err(ApiError::internal)?);
    let mut written = 0usize;
    while let Some(piece) = field.chunk().await.map_err(|e| multipart_error(e, limit))? {
        if written + piece.len() > limit {
            return Err(KnowledgeError::TooLarge {
                file: name.to_string(),
                bytes: written + piece.len(),
                limit,
            }
            .into());
        }
        out.write_all(&piece).await.map_err(ApiError::internal)?;
        written += piece.len();
    }
    out.flush().await.map_err(ApiError::internal)?;
    Ok(Spooled {
        name: name.to_string(),
        content_type: field.content_type().map(str::to_string),
        file,
    })
}

/// `POST /api/agents/{agent}/documents`: multipart `file` (one or more) and `roomId`, in
/// any order. Answers 201 with `{documents: [{id, source, chunks, duplicate, roomId}]}`
/// and, for the first file, the same fields at the top level; 200 when every file was a
/// duplicate. Any error leaves nothing of the request stored.
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

    // 1. Every field, before anything is read or stored.
    let mut room: Option<RoomKey> = None;
    let mut files: Vec<Spooled> = Vec::new();
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(e, limit))?
    {
        match field.name().unwrap_or("") {
            "roomId" if room.is_some() => {
                return Err(ApiError::bad_request(
                    "`roomId` is given twice: an upload goes to one room, or to the whole agent",
                ));
            }
            "roomId" => {
                let text = field.text().await.map_err(|e| multipart_error(e, limit))?;
                room = Some(room_key(&text)?);
            }
            "file" => {
                if files.len() == settings.max_files_per_request {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_many_files",
                        format!(
                            "at most {} files per request (TROUPE_KNOWLEDGE_MAX_FILES);                              nothing was stored",
                            settings.max_files_per_request
                        ),
                    ));
                }
                let name = field
                    .file_name()
                    .map(str::to_string)
                    .filter(|n| !n.trim().is_empty())
                    .unwrap_or_else(|| format!("upload-{}", files.len() + 1));
                files.push(spool(&mut field, &name, limit).await?);
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown multipart field `{other}`: send the document as `file` and, \
                     optionally, the room as `roomId`"
                )));
            }
        }
    }
    if files.is_empty() {
        return Err(ApiError::bad_request(
            "no `file` field: send the document as multipart/form-data with a `file` field",
        ));
    }

    // 2. Every file read and chunked (in the sandboxed worker); nothing stored yet.
    let mut prepared = Vec::with_capacity(files.len());
    for f in &files {
        prepared.push(
            knowledge
                .prepare(
                    &agent.id,
                    room.as_ref(),
                    &f.name,
                    f.content_type.as_deref(),
                    Input::File(f.file.path()),
                )
                .await?,
        );
    }
    drop(files);

    // 3. All stored, or none.
    let names: Vec<String> = prepared.iter().map(|p| p.source().to_string()).collect();
    let done = knowledge
        .store_all(Origin::Upload, &agent.id, prepared)
        .await?;
    let documents: Vec<Value> = done
        .into_iter()
        .zip(names)
        .map(|(d, name)| {
            json!({
                "id": d.document_id,
                "source": name,
                "chunks": d.chunks,
                "duplicate": d.duplicate,
                "roomId": room,
            })
        })
        .collect();
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
        .documents(&agent.id, room.as_ref().map(Some))
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
        .search(&agent.id, room.as_ref(), &q, limit)
        .await?;
    Ok(Json(json!({ "query": q, "roomId": room, "results": hits })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn room_ids_parse_like_the_messages_route() {
        assert_eq!(super::room_key("r1").unwrap().to_string(), "web:r1");
        assert_eq!(
            super::room_key("telegram:-100").unwrap().to_string(),
            "telegram:-100"
        );
        assert!(super::room_key(" ").is_err());
    }
}
