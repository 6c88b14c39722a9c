//! Knowledge records: documents, their chunks, the change sequence and embedding vectors.
//!
//! A document belongs to an agent and a scope: `""` for the whole agent, or a room key
//! (`platform:room`). Keyword ranking is not done here: the keyword index
//! (`knowledge/index.rs`) is a cache built from these tables, and follows them through
//! `knowledge_changes`, one row per stored or deleted document, written in the same
//! transaction. Vectors are bytes here; similarity is the caller's business (no pgvector or
//! sqlite-vec is assumed).

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

/// A chunk as the keyword index takes it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IndexChunk {
    pub seq: i64,
    pub id: String,
    pub document_id: String,
    pub agent_id: AgentId,
    pub scope: Scope,
    pub text: String,
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

/// A row of `embedding_changes`: `op` is `put` (vectors stored, carrying this seq) or `drop`
/// (the agent's vectors of the model removed).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct EmbeddingChange {
    pub seq: i64,
    pub agent_id: AgentId,
    pub op: String,
}

/// A stored vector as a vector index takes it: `key` is its chunk's seq (a unique integer,
/// which approximate indexes want as a key).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredVector {
    pub key: i64,
    pub chunk_id: String,
    pub document_id: String,
    pub agent_id: AgentId,
    pub scope: Scope,
    pub change_seq: i64,
    /// Little-endian f32s.
    pub vector: Vec<u8>,
}

/// The keys [`Store::vectors_in`] selects by.
#[derive(Clone, Copy)]
enum VectorsIn<'a> {
    Changes(&'a [i64]),
    Documents(&'a [String]),
}

const STORED_VECTOR_SELECT: &str = "SELECT c.seq AS key, e.chunk_id, c.document_id, e.agent_id, \
     e.scope, e.change_seq, e.vector FROM chunk_embeddings e JOIN chunks c ON c.id = e.chunk_id";

/// Appends a row to `embedding_changes` inside the transaction `$tx` and gives its seq. On
/// Postgres the same kind of transaction-scoped advisory lock as `record_change!` (its own
/// key) makes seqs visible in order, so a follower never skips one that commits late.
macro_rules! record_embedding_change {
    ($store:expr, $tx:ident, $model:expr, $agent:expr, $op:expr) => {{
        if $store.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(EMBEDDING_CHANGES_LOCK)
                .execute(&mut *$tx)
                .await?;
        }
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO embedding_changes (model, agent_id, op) VALUES ($1, $2, $3) RETURNING seq",
        )
        .bind($model)
        .bind($agent)
        .bind($op)
        .fetch_one(&mut *$tx)
        .await?
    }};
}

/// The advisory lock key of `embedding_changes` writers ("vecs" in ASCII).
const EMBEDDING_CHANGES_LOCK: i64 = 0x7665_6373;

/// Appends a row to `knowledge_changes` inside the transaction `$tx`, and gives its `seq`.
/// On Postgres a transaction-scoped advisory lock is taken first, so `seq`s become visible
/// in order (a writer holding a lower `seq` has committed before a higher one is handed
/// out) and an index that read up to `seq` n never misses a lower one committed late.
/// SQLite writers are serialized already.
macro_rules! record_change {
    ($store:expr, $tx:ident, $document:expr, $op:expr) => {{
        if $store.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(CHANGES_LOCK)
                .execute(&mut *$tx)
                .await?;
        }
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO knowledge_changes (document_id, op) VALUES ($1, $2) RETURNING seq",
        )
        .bind($document)
        .bind($op)
        .fetch_one(&mut *$tx)
        .await?
    }};
}

/// The advisory lock key of `knowledge_changes` writers (any fixed number; "knowl" in ASCII).
const CHANGES_LOCK: i64 = 0x006b_6e6f_776c;

const DOCUMENT_COLUMNS: &str = "id, agent_id, scope, source, content_type, content_hash, origin, \
     bytes, chunk_count, created_at_ms";

impl Store {
    /// Stores a document and its chunks, and gives the `knowledge_changes` seq of the
    /// addition (the keyword index applies the chunks in hand when it is the next change:
    /// `knowledge::index`). Returns `None`, changing nothing, when a document with this id
    /// exists already (a concurrent upload of the same content).
    pub async fn insert_document(&self, doc: &NewDocument<'_>) -> Result<Option<i64>> {
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
                None
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
                let seq = record_change!(self, tx, doc.id, "add");
                tx.commit().await?;
                Some(seq)
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
            if done.rows_affected() > 0 {
                record_change!(self, tx, id, "delete");
            }
            tx.commit().await?;
            done.rows_affected() > 0
        });
        Ok(deleted)
    }

    /// The latest `knowledge_changes` seq, 0 when there is none.
    pub async fn last_knowledge_change(&self) -> Result<i64> {
        let seq = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(seq) FROM knowledge_changes")
                .fetch_one(pool)
                .await
        })?;
        Ok(seq.unwrap_or(0))
    }

    /// Up to `limit` changes after `after`, in order: `(seq, document id)`.
    pub async fn knowledge_changes_after(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (i64, String)>(
                "SELECT seq, document_id FROM knowledge_changes WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// The chunks of these documents as they are now (none for a deleted one).
    pub async fn chunks_of_documents(&self, document_ids: &[String]) -> Result<Vec<IndexChunk>> {
        let mut out = Vec::new();
        for batch in document_ids.chunks(INSERT_BATCH) {
            let rows = with_pool!(self, pool => {
                let mut q = sqlx::QueryBuilder::new(
                    "SELECT seq, id, document_id, agent_id, scope, text FROM chunks
                     WHERE document_id IN (",
                );
                let mut list = q.separated(", ");
                for id in batch {
                    list.push_bind(id.as_str());
                }
                q.push(") ORDER BY seq");
                q.build_query_as::<IndexChunk>().fetch_all(pool).await
            })?;
            out.extend(rows);
        }
        Ok(out)
    }

    /// Every chunk after `after_seq`, `limit` at a time in order: for a rebuild.
    pub async fn chunks_after(&self, after_seq: i64, limit: usize) -> Result<Vec<IndexChunk>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, IndexChunk>(
                "SELECT seq, id, document_id, agent_id, scope, text FROM chunks
                 WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .bind(after_seq)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
        })?;
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
    /// replaced. Each batch is one transaction with its `embedding_changes` row, whose seq
    /// the vectors carry (`change_seq`), so vector indexes (knowledge/vectors.rs) follow.
    pub async fn put_embeddings(&self, model: &str, rows: &[NewEmbedding]) -> Result<()> {
        for batch in rows.chunks(INSERT_BATCH) {
            let Some(first) = batch.first() else {
                continue;
            };
            with_pool!(self, pool => {
                let mut tx = pool.begin().await?;
                let seq = record_embedding_change!(self, tx, model, &first.agent_id, "put");
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO chunk_embeddings \
                     (chunk_id, model, agent_id, scope, dim, vector, change_seq) ",
                );
                q.push_values(batch, |mut row, e| {
                    row.push_bind(e.chunk_id.as_str())
                        .push_bind(model)
                        .push_bind(&e.agent_id)
                        .push_bind(&e.scope)
                        .push_bind((e.vector.len() / 4) as i64)
                        .push_bind(e.vector.as_slice())
                        .push_bind(seq);
                });
                q.push(
                    " ON CONFLICT (chunk_id, model) DO UPDATE SET dim = excluded.dim, \
                     vector = excluded.vector, change_seq = excluded.change_seq",
                );
                q.build().execute(&mut *tx).await?;
                tx.commit().await.map(|_| ())
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

    /// Removes an agent's vectors for `model` (before re-embedding them all), with a
    /// `drop` row in `embedding_changes` so that vector indexes drop them too.
    pub async fn delete_embeddings(&self, agent_id: &AgentId, model: &str) -> Result<u64> {
        let n = with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            record_embedding_change!(self, tx, model, agent_id, "drop");
            let n = sqlx::query("DELETE FROM chunk_embeddings WHERE agent_id = $1 AND model = $2")
                .bind(agent_id)
                .bind(model)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            n
        });
        Ok(n)
    }

    /// The latest `embedding_changes` seq of `model`, 0 when there is none.
    pub async fn last_embedding_change(&self, model: &str) -> Result<i64> {
        let seq = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<i64>>(
                "SELECT MAX(seq) FROM embedding_changes WHERE model = $1",
            )
            .bind(model)
            .fetch_one(pool)
            .await
        })?;
        Ok(seq.unwrap_or(0))
    }

    /// How many of `agent_id`'s chunks there are, and how many of them have a vector of
    /// `model`: what `GET /api/agents/{agent}` and the console show.
    pub async fn embedding_coverage(&self, agent_id: &AgentId, model: &str) -> Result<(i64, i64)> {
        let counts = with_pool!(self, pool => {
            sqlx::query_as::<_, (i64, i64)>(
                "SELECT COUNT(*), COUNT(e.chunk_id) FROM chunks c
                 LEFT JOIN chunk_embeddings e ON e.chunk_id = c.id AND e.model = $2
                 WHERE c.agent_id = $1",
            )
            .bind(agent_id)
            .bind(model)
            .fetch_one(pool)
            .await
        })?;
        Ok(counts)
    }

    /// Per document of `agent_id`, how many of its chunks have a vector of `model` (only
    /// documents with at least one).
    pub async fn embedded_by_document(
        &self,
        agent_id: &AgentId,
        model: &str,
    ) -> Result<Vec<(String, i64)>> {
        let counts = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, i64)>(
                "SELECT c.document_id, COUNT(*) FROM chunks c
                 JOIN chunk_embeddings e ON e.chunk_id = c.id AND e.model = $2
                 WHERE c.agent_id = $1 GROUP BY c.document_id",
            )
            .bind(agent_id)
            .bind(model)
            .fetch_all(pool)
            .await
        })?;
        Ok(counts)
    }

    /// The vector sizes stored for `model`.
    pub async fn embedding_dims(&self, model: &str) -> Result<Vec<usize>> {
        let dims = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT DISTINCT dim FROM chunk_embeddings WHERE model = $1 ORDER BY dim",
            )
            .bind(model)
            .fetch_all(pool)
            .await
        })?;
        Ok(dims
            .into_iter()
            .filter_map(|d| usize::try_from(d).ok())
            .collect())
    }

    /// Up to `limit` changes of `model`'s vectors after `after`, in order.
    pub async fn embedding_changes_after(
        &self,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EmbeddingChange>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, EmbeddingChange>(
                "SELECT seq, agent_id, op FROM embedding_changes
                 WHERE seq > $1 AND model = $2 ORDER BY seq LIMIT $3",
            )
            .bind(after)
            .bind(model)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// `model`'s vectors stored by these changes and not replaced since.
    pub async fn vectors_of_changes(
        &self,
        model: &str,
        changes: &[i64],
    ) -> Result<Vec<StoredVector>> {
        self.vectors_in(model, VectorsIn::Changes(changes)).await
    }

    /// `model`'s vectors of these documents as they are now (none for a deleted one).
    pub async fn vectors_of_documents(
        &self,
        model: &str,
        document_ids: &[String],
    ) -> Result<Vec<StoredVector>> {
        self.vectors_in(model, VectorsIn::Documents(document_ids))
            .await
    }

    /// `model`'s vectors whose change or document is in the list, `INSERT_BATCH` keys per
    /// query so that no statement passes a backend's bind limit.
    async fn vectors_in(&self, model: &str, keys: VectorsIn<'_>) -> Result<Vec<StoredVector>> {
        let (column, len) = match keys {
            VectorsIn::Changes(seqs) => ("e.change_seq", seqs.len()),
            VectorsIn::Documents(ids) => ("c.document_id", ids.len()),
        };
        let mut out = Vec::new();
        for start in (0..len).step_by(INSERT_BATCH) {
            let batch = start..(start + INSERT_BATCH).min(len);
            let rows = with_pool!(self, pool => {
                let mut q = sqlx::QueryBuilder::new(STORED_VECTOR_SELECT);
                q.push(" WHERE e.model = ")
                    .push_bind(model)
                    .push(" AND ")
                    .push(column)
                    .push(" IN (");
                let mut list = q.separated(", ");
                match keys {
                    VectorsIn::Changes(seqs) => {
                        for seq in &seqs[batch.clone()] {
                            list.push_bind(*seq);
                        }
                    }
                    VectorsIn::Documents(ids) => {
                        for id in &ids[batch.clone()] {
                            list.push_bind(id.as_str());
                        }
                    }
                }
                q.push(")");
                q.build_query_as::<StoredVector>().fetch_all(pool).await
            })?;
            out.extend(rows);
        }
        Ok(out)
    }

    /// Every vector of `model` whose chunk's seq is after `after_key`, `limit` at a time in
    /// that order: for a rebuild.
    pub async fn vectors_after(
        &self,
        model: &str,
        after_key: i64,
        limit: usize,
    ) -> Result<Vec<StoredVector>> {
        let sql = format!(
            "{STORED_VECTOR_SELECT} WHERE e.model = $1 AND c.seq > $2 ORDER BY c.seq LIMIT $3"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, StoredVector>(sqlx::AssertSqlSafe(sql))
                .bind(model)
                .bind(after_key)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(pool)
                .await
        })?;
        Ok(rows)
    }
}
