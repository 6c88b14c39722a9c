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
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use troupe_connectors::{AgentId, RoomKey};

use super::AppState;
use super::error::ApiError;
use super::extract::{AgentPath, lenient_room, room_param};
use crate::knowledge::{
    Document, Hit, Ingested, Input, Knowledge, KnowledgeError, KnowledgeSettings, Origin, Prepared,
    Vectors,
};

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
                // A document read takes seconds; after that a worker is likely free.
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", why).retry_after(5)
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
            KnowledgeError::Index(e) => ApiError::internal(e),
            KnowledgeError::Vectors(e) => ApiError::internal(e),
        }
    }
}

fn knowledge(state: &AppState) -> Result<&Knowledge, ApiError> {
    Ok(&state.knowledge)
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

/// One stored file of an upload.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Uploaded {
    id: String,
    source: String,
    chunks: usize,
    duplicate: bool,
    room_id: Option<RoomKey>,
}

/// An upload's answer: the first file's fields at the top level, and every file in order.
#[derive(Debug, Serialize)]
pub struct UploadAnswer {
    #[serde(flatten)]
    first: Uploaded,
    documents: Vec<Uploaded>,
}

/// `POST /api/agents/{agent}/documents`: multipart `file` (one or more) and `roomId`, in
/// any order. Answers 201 with `{documents: [{id, source, chunks, duplicate, roomId}]}`
/// and, for the first file, the same fields at the top level; 200 when every file was a
/// duplicate. Any error leaves nothing of the request stored.
pub async fn upload(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let multipart = multipart.map_err(|e| {
        ApiError::bad_request(format!(
            "{}: send the document as multipart/form-data with a `file` field",
            e.body_text()
        ))
    })?;
    let knowledge = knowledge(&state)?;
    // 1. Every field, before anything is read or stored.
    let (scope, files) = read_fields(multipart, knowledge.settings()).await?;
    // 2. Every file read and chunked (in the sandboxed worker); nothing stored yet.
    let prepared = prepare_all(knowledge, &agent.id, scope.as_ref(), files).await?;
    // 3. All stored, or none.
    let names: Vec<String> = prepared.iter().map(|p| p.source().to_string()).collect();
    let done = knowledge
        .store_all(Origin::Upload, &agent.id, prepared)
        .await?;
    upload_answer(done, names, scope)
}

/// Every field of an upload, each file spooled: the room it goes to (`None`: the whole
/// agent) and the files, at least one.
async fn read_fields(
    mut multipart: Multipart,
    settings: &KnowledgeSettings,
) -> Result<(Option<RoomKey>, Vec<Spooled>), ApiError> {
    let limit = settings.max_file_bytes;
    let mut scope: Option<RoomKey> = None;
    let mut files: Vec<Spooled> = Vec::new();
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(e, limit))?
    {
        match field.name().unwrap_or("") {
            "roomId" if scope.is_some() => {
                return Err(ApiError::bad_request(
                    "`roomId` is given twice: an upload goes to one room, or to the whole agent",
                ));
            }
            "roomId" => {
                let text = field.text().await.map_err(|e| multipart_error(e, limit))?;
                scope = Some(room_param("roomId", &text)?);
            }
            "file" if files.len() == settings.max_files_per_request => {
                return Err(too_many_files(settings.max_files_per_request));
            }
            "file" => {
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
    Ok((scope, files))
}

/// 413 for a file past `TROUPE_KNOWLEDGE_MAX_FILES`.
fn too_many_files(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_many_files",
        format!(
            "at most {max} files per request (TROUPE_KNOWLEDGE_MAX_FILES); \
             nothing was stored"
        ),
    )
}

/// Every spooled file read and chunked, in order, as many at once as there are document
/// workers (issue 48: the files of an upload are read side by side); the temporary files
/// go once read.
async fn prepare_all(
    knowledge: &Knowledge,
    agent: &AgentId,
    scope: Option<&RoomKey>,
    files: Vec<Spooled>,
) -> Result<Vec<Prepared>, ApiError> {
    use futures::{StreamExt, TryStreamExt};
    let workers = knowledge.settings().extract.workers.max(1);
    // By index, not by reference: a stream over borrowed items makes the handler's future
    // not general enough for axum.
    let prepared: Vec<Prepared> = futures::stream::iter(0..files.len())
        .map(|i| {
            let f = &files[i];
            knowledge.prepare(
                agent,
                scope,
                &f.name,
                f.content_type.as_deref(),
                Input::File(f.file.path()),
            )
        })
        .buffered(workers)
        .try_collect()
        .await?;
    Ok(prepared)
}

/// 201 with the stored documents, the first one's fields also at the top level; 200 when
/// every file was a duplicate.
fn upload_answer(
    done: Vec<Ingested>,
    names: Vec<String>,
    scope: Option<RoomKey>,
) -> Result<Response, ApiError> {
    let documents: Vec<Uploaded> = done
        .into_iter()
        .zip(names)
        .map(|(d, name)| Uploaded {
            id: d.document_id.to_string(),
            source: name,
            chunks: d.chunks,
            duplicate: d.duplicate,
            room_id: scope.clone(),
        })
        .collect();
    let status = if documents.iter().all(|d| d.duplicate) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    // `store_all` answers one entry per prepared file, and there is at least one file.
    let Some(first) = documents.first().cloned() else {
        return Err(ApiError::internal("an upload stored no document"));
    };
    Ok((status, Json(UploadAnswer { first, documents })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default, deserialize_with = "lenient_room")]
    room_id: Option<RoomKey>,
}

/// A stored document, as listed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentView {
    id: String,
    source: String,
    /// The room it is scoped to; `null` for the whole agent.
    room_id: Option<RoomKey>,
    content_type: String,
    /// Who added it: `upload`, `cli`, `character` or `attachment`.
    origin: String,
    bytes: i64,
    chunks: i64,
    /// `{done, total}`: how many of its chunks have a vector (the rest are being embedded
    /// in the background); `null` when search is keywords only.
    vectors: Option<Vectors>,
    created_at_ms: i64,
}

impl DocumentView {
    fn of(d: Document) -> Result<Self, ApiError> {
        Ok(DocumentView {
            room_id: d.room_id,
            id: d.id.to_string(),
            source: d.source,
            content_type: d.content_type,
            origin: d.origin.to_string(),
            bytes: d.bytes,
            chunks: d.chunks,
            vectors: d.vectors,
            created_at_ms: d.created_at_ms,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct DocumentList {
    documents: Vec<DocumentView>,
}

/// `GET /api/agents/{agent}/documents[?roomId=]`.
pub async fn list(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<DocumentList>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let documents = knowledge(&state)?
        .documents(&agent.id, query.room_id.as_ref().map(Some))
        .await?
        .into_iter()
        .map(DocumentView::of)
        .collect::<Result<_, _>>()?;
    Ok(Json(DocumentList { documents }))
}

/// `DELETE /api/agents/{agent}/documents/{id}`: 204, or 404 when unknown.
pub async fn delete(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    Path(params): Path<DocumentParams>,
) -> Result<StatusCode, ApiError> {
    knowledge(&state)?.delete(&agent.id, &params.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The path of one document; `{agent}` is [`AgentPath`]'s.
#[derive(Debug, Deserialize)]
pub struct DocumentParams {
    id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchQuery {
    q: Option<String>,
    #[serde(default, deserialize_with = "lenient_room")]
    room_id: Option<RoomKey>,
    limit: Option<usize>,
}

/// One retrieved passage.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HitView {
    chunk_id: String,
    document_id: String,
    source: String,
    /// The chunk's position in its document, from 0.
    chunk: i64,
    text: String,
    /// Higher is better: BM25, or the fused score with embeddings.
    score: f64,
}

impl From<Hit> for HitView {
    fn from(h: Hit) -> Self {
        HitView {
            chunk_id: h.chunk_id.to_string(),
            document_id: h.document_id.to_string(),
            source: h.source,
            chunk: h.chunk,
            text: h.text,
            score: h.score,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchAnswer {
    query: String,
    room_id: Option<RoomKey>,
    results: Vec<HitView>,
}

/// `GET /api/agents/{agent}/knowledge/search?q=&roomId=&limit=`: the chunks a prompt in that
/// room would get, with their scores and sources (limit default `TROUPE_KNOWLEDGE_TOP_K`,
/// at most 100).
pub async fn search(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    query: Result<Query<SearchQuery>, QueryRejection>,
) -> Result<Json<SearchAnswer>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
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
    let limit = query
        .limit
        .unwrap_or(knowledge.settings().top_k.max(1))
        .clamp(1, 100);
    let hits = knowledge
        .search(&agent.id, query.room_id.as_ref(), &q, limit)
        .await?;
    Ok(Json(SearchAnswer {
        query: q,
        room_id: query.room_id,
        results: hits.into_iter().map(HitView::from).collect(),
    }))
}
