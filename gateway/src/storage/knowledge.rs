//! Knowledge records: documents, their chunks, the full-text index and embedding vectors.
//!
//! A document belongs to an agent and a scope: `""` for the whole agent, or a room key
//! (`platform:room`). Ranking differs per backend and is the only SQL that does: SQLite
//! ranks with FTS5's `bm25()`, Postgres with `ts_rank_cd` over a stored `tsvector` (not
//! literally BM25: no inverse document frequency). Vectors are bytes here; similarity is the
//! caller's business (no pgvector or sqlite-vec is assumed).

use std::fmt;

use troupe_connectors::{AgentId, RoomKey};

use super::{Backend, Result, Store, now_ms, with_pool};

/// Chunks inserted per statement: few enough that one statement (with its FTS indexing)
/// stays well under sqlx's one-second slow-statement warning on a busy machine.
const INSERT_BATCH: usize = 100;

/// Where a document applies: the whole agent, or one room. Stored in the `scope` column as
/// `""` or the room key (`platform:room`); a value that is neither is a decode error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Scope(Option<RoomKey>);

impl Scope {
    /// The whole agent.
    pub const AGENT: Scope = Scope(None);

    /// One room when given, else the whole agent.
    pub fn new(room: Option<&RoomKey>) -> Self {
        Scope(room.cloned())
    }

    /// The room, `None` for the whole agent.
    pub fn room(&self) -> Option<&RoomKey> {
        self.0.as_ref()
    }

    pub fn into_room(self) -> Option<RoomKey> {
        self.0
    }
}

/// The column's text: `""`, or the room key.
impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(room) => room.fmt(f),
            None => Ok(()),
        }
    }
}

/// The column's text read back: `""` is the whole agent, anything else must be a room key
/// (a row that is neither is a decode error, not a silently wrong scope).
impl std::str::FromStr for Scope {
    type Err = troupe_connectors::BadRoomKey;
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        if text.is_empty() {
            return Ok(Scope::AGENT);
        }
        Ok(Scope(Some(text.parse::<RoomKey>()?)))
    }
}

troupe_connectors::text_column!(Scope);

/// A document to store with its chunks, in one transaction.
#[derive(Debug, Clone)]
pub struct NewDocument<'a> {
    pub id: &'a str,
    pub agent_id: &'a AgentId,
    pub scope: &'a Scope,
    pub source: &'a str,
    pub content_type: &'a str,
    pub content_hash: &'a str,
    pub origin: &'a str,
    pub bytes: i64,
    /// `(chunk id, text)`, in order.
    pub chunks: &'a [(String, String)],
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DocumentRow {
    pub id: String,
    pub agent_id: AgentId,
    pub scope: Scope,
    pub source: String,
    pub content_type: String,
    pub content_hash: String,
    pub origin: String,
    pub bytes: i64,
    pub chunk_count: i64,
    pub created_at_ms: i64,
}

/// A chunk with its document's source, and a score whose meaning depends on the query.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ScoredChunk {
    pub chunk_id: String,
    pub document_id: String,
    pub source: String,
    pub text: String,
    pub score: f64,
}

/// A chunk that has no vector for some model yet.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UnembeddedChunk {
    pub seq: i64,
    pub id: String,
    pub agent_id: AgentId,
    pub scope: Scope,
    pub text: String,
}

/// A chunk's vector for one model, to store.
#[derive(Debug, Clone)]
pub struct NewEmbedding {
    pub chunk_id: String,
    pub agent_id: AgentId,
    pub scope: Scope,
    /// Little-endian f32s.
    pub vector: Vec<u8>,
}

const DOCUMENT_COLUMNS: &str = "id, agent_id, scope, source, content_type, content_hash, origin, \
     bytes, chunk_count, created_at_ms";

impl Store {
    /// Stores a document and its chunks. Returns false, changing nothing, when a document
    /// with this id exists already (a concurrent upload of the same content).
    pub async fn insert_document(&self, doc: &NewDocument<'_>) -> Result<bool> {
        let now = now_ms();
        let inserted = with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let done = sqlx::query(
                "INSERT INTO documents (id, agent_id, scope, source, content_type, content_hash,
                     origin, bytes, chunk_count, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT DO NOTHING",
            )
            .bind(doc.id)
            .bind(doc.agent_id)
            .bind(doc.scope)
            .bind(doc.source)
            .bind(doc.content_type)
            .bind(doc.content_hash)
            .bind(doc.origin)
            .bind(doc.bytes)
            .bind(doc.chunks.len() as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                tx.rollback().await?;
                false
            } else {
                for (batch_no, batch) in doc.chunks.chunks(INSERT_BATCH).enumerate() {
                    let mut q = sqlx::QueryBuilder::new(
                        "INSERT INTO chunks (id, document_id, agent_id, scope, idx, text) ",
                    );
                    q.push_values(batch.iter().enumerate(), |mut row, (i, (id, text))| {
                        row.push_bind(id.as_str())
                            .push_bind(doc.id)
                            .push_bind(doc.agent_id)
                            .push_bind(doc.scope)
                            .push_bind((batch_no * INSERT_BATCH + i) as i64)
                            .push_bind(text.as_str());
                    });
                    q.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                true
            }
        });
        Ok(inserted)
    }

    pub async fn document(&self, agent_id: &AgentId, id: &str) -> Result<Option<DocumentRow>> {
        let sql =
            format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE agent_id = $1 AND id = $2");
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, DocumentRow>(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(id)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row)
    }

    /// An agent's documents, newest first; only those of `scope` when given.
    pub async fn documents(
        &self,
        agent_id: &AgentId,
        scope: Option<&Scope>,
    ) -> Result<Vec<DocumentRow>> {
        let sql = format!(
            "SELECT {DOCUMENT_COLUMNS} FROM documents
             WHERE agent_id = $1 AND ($2 IS NULL OR scope = $2)
             ORDER BY created_at_ms DESC, id"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DocumentRow>(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(scope)
                .fetch_all(pool)
                .await
        })?;
        Ok(rows)
    }

    /// The ids of an agent's documents that came from `origin`.
    pub async fn document_ids_by_origin(
        &self,
        agent_id: &AgentId,
        origin: &str,
    ) -> Result<Vec<String>> {
        let ids = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>(
                "SELECT id FROM documents WHERE agent_id = $1 AND origin = $2 ORDER BY id",
            )
            .bind(agent_id)
            .bind(origin)
            .fetch_all(pool)
            .await
        })?;
        Ok(ids)
    }

    /// Deletes a document with its chunks and vectors; false when there was none.
    pub async fn delete_document(&self, agent_id: &AgentId, id: &str) -> Result<bool> {
        let deleted = with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "DELETE FROM chunk_embeddings WHERE chunk_id IN
                     (SELECT id FROM chunks WHERE document_id = $1 AND agent_id = $2)",
            )
            .bind(id)
            .bind(agent_id)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM chunks WHERE document_id = $1 AND agent_id = $2")
                .bind(id)
                .bind(agent_id)
                .execute(&mut *tx)
                .await?;
            let done = sqlx::query("DELETE FROM documents WHERE id = $1 AND agent_id = $2")
                .bind(id)
                .bind(agent_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            done.rows_affected() > 0
        });
        Ok(deleted)
    }

    /// Full-text search over the chunks of `agent_id` in `scope` and the agent-wide ones,
    /// best first; the score is higher for better matches. `terms` are plain words (letters
    /// and digits only: the caller has cut the query), any of which may match.
    pub async fn search_chunks(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<ScoredChunk>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match self.backend() {
            Backend::Sqlite => {
                // Quoted, each term is a literal to FTS5, never an operator. CROSS JOIN fixes
                // the join order (SQLite's rule for it): the full-text match runs once and
                // drives the lookups. Left to the planner, SQLite 3.51 scanned the agent's
                // chunks and ran the match once per chunk: 13 s instead of 50 ms on 13k chunks.
                let query = terms
                    .iter()
                    .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                // The ranking runs over row ids and scores only; the text and the source
                // are read for the winners alone, not for every chunk that matched.
                with_pool!(self, pool => {
                    sqlx::query_as::<_, ScoredChunk>(
                        "WITH top AS (
                             SELECT chunks_fts.rowid AS seq, bm25(chunks_fts) AS rank
                             FROM chunks_fts
                             CROSS JOIN chunks c ON c.seq = chunks_fts.rowid
                             WHERE chunks_fts MATCH $1 AND c.agent_id = $2
                               AND (c.scope = '' OR c.scope = $3)
                             ORDER BY rank, chunks_fts.rowid
                             LIMIT $4)
                         SELECT c.id AS chunk_id, c.document_id, d.source, c.text,
                                -top.rank AS score
                         FROM top
                         CROSS JOIN chunks c ON c.seq = top.seq
                         CROSS JOIN documents d ON d.id = c.document_id
                         ORDER BY top.rank, top.seq",
                    )
                    .bind(query)
                    .bind(agent_id)
                    .bind(scope)
                    .bind(limit)
                    .fetch_all(pool)
                    .await
                })?
            }
            Backend::Postgres => {
                // `or` between the words: any may match. websearch_to_tsquery never fails on
                // odd input (to_tsquery would on some Unicode); it stems the words and drops
                // stop words as to_tsvector did.
                let query = terms.join(" or ");
                with_pool!(self, pool => {
                    sqlx::query_as::<_, ScoredChunk>(
                        "WITH top AS (
                             SELECT c.seq, ts_rank_cd(c.tsv, q, 1)::float8 AS score
                             FROM chunks c, websearch_to_tsquery('english', $1) q
                             WHERE c.tsv @@ q AND c.agent_id = $2
                               AND (c.scope = '' OR c.scope = $3)
                             ORDER BY score DESC, c.seq
                             LIMIT $4)
                         SELECT c.id AS chunk_id, c.document_id, d.source, c.text, top.score
                         FROM top
                         JOIN chunks c ON c.seq = top.seq
                         JOIN documents d ON d.id = c.document_id
                         ORDER BY top.score DESC, top.seq",
                    )
                    .bind(query)
                    .bind(agent_id)
                    .bind(scope)
                    .bind(limit)
                    .fetch_all(pool)
                    .await
                })?
            }
        };
        Ok(rows)
    }

    /// The chunks with these ids (score 0), in no particular order.
    pub async fn chunks_by_id(&self, ids: &[String]) -> Result<Vec<ScoredChunk>> {
        let mut out = Vec::with_capacity(ids.len());
        for batch in ids.chunks(INSERT_BATCH) {
            let rows = with_pool!(self, pool => {
                let mut q = sqlx::QueryBuilder::new(
                    "SELECT c.id AS chunk_id, c.document_id, d.source, c.text,
                            CAST(0 AS DOUBLE PRECISION) AS score
                     FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id IN (",
                );
                let mut list = q.separated(", ");
                for id in batch {
                    list.push_bind(id.as_str());
                }
                q.push(")");
                q.build_query_as::<ScoredChunk>().fetch_all(pool).await
            })?;
            out.extend(rows);
        }
        Ok(out)
    }

    /// Chunks of `agent_id` (every agent when `None`) without a vector for `model`, after
    /// `after_seq`, in order: the caller pages through them.
    pub async fn chunks_without_embedding(
        &self,
        agent_id: Option<&AgentId>,
        model: &str,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<UnembeddedChunk>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, UnembeddedChunk>(
                "SELECT c.seq, c.id, c.agent_id, c.scope, c.text FROM chunks c
                 WHERE ($1 IS NULL OR c.agent_id = $1) AND c.seq > $2
                   AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e
                                   WHERE e.chunk_id = c.id AND e.model = $3)
                 ORDER BY c.seq LIMIT $4",
            )
            .bind(agent_id)
            .bind(after_seq)
            .bind(model)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// Stores vectors for `model`. A vector already stored for a chunk and model is
    /// replaced.
    pub async fn put_embeddings(&self, model: &str, rows: &[NewEmbedding]) -> Result<()> {
        for batch in rows.chunks(INSERT_BATCH) {
            with_pool!(self, pool => {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO chunk_embeddings (chunk_id, model, agent_id, scope, dim, vector) ",
                );
                q.push_values(batch, |mut row, e| {
                    row.push_bind(e.chunk_id.as_str())
                        .push_bind(model)
                        .push_bind(&e.agent_id)
                        .push_bind(&e.scope)
                        .push_bind((e.vector.len() / 4) as i64)
                        .push_bind(e.vector.as_slice());
                });
                q.push(
                    " ON CONFLICT (chunk_id, model) DO UPDATE SET dim = excluded.dim, \
                     vector = excluded.vector",
                );
                q.build().execute(pool).await.map(|_| ())
            })?;
        }
        Ok(())
    }

    /// Every vector of `model` for the chunks of `agent_id` in `scope` and the agent-wide
    /// ones: `(chunk id, little-endian f32 bytes)`.
    pub async fn embeddings(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        model: &str,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, Vec<u8>)>(
                "SELECT chunk_id, vector FROM chunk_embeddings
                 WHERE agent_id = $1 AND model = $2 AND (scope = '' OR scope = $3)",
            )
            .bind(agent_id)
            .bind(model)
            .bind(scope)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// Removes an agent's vectors for `model` (before re-embedding them all).
    pub async fn delete_embeddings(&self, agent_id: &AgentId, model: &str) -> Result<u64> {
        let n = with_pool!(self, pool => {
            sqlx::query("DELETE FROM chunk_embeddings WHERE agent_id = $1 AND model = $2")
                .bind(agent_id)
                .bind(model)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
        })?;
        Ok(n)
    }
}
