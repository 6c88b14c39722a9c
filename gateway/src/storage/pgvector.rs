//! pgvector on Postgres: the extension, the `embedding` column and one HNSW index per
//! embedding model, and nearest-neighbour queries through them.
//!
//! The bytes in `chunk_embeddings.vector` stay the source of truth on every backend; the
//! `embedding` column is a typed copy that only exists where the extension does. It is
//! created here, at start, not by a migration, so a database migrated on a server without
//! pgvector gains the index path when the extension is installed later, and a server
//! without it needs nothing. Writers do not know about the column: a trigger empties it
//! when a vector is replaced, and the follower (knowledge/vectors.rs) fills it from the
//! bytes, in order of `change_seq`.
//!
//! Vectors have a model-dependent size, and HNSW needs a fixed one, so each (model, size)
//! gets a partial expression index: `(embedding::vector(N))` over the rows
//! `WHERE model = '…' AND dim = N`. A query repeats that predicate and cast with literals
//! (the model name quoted as an SQL string), so the planner can prove the partial index
//! applies; a bind parameter could not. pgvector's HNSW takes at most 2,000 dimensions.

use sha2::{Digest, Sha256};
use troupe_connectors::AgentId;

use super::{Pool, Result, Scope, Store};

/// The largest vector pgvector's HNSW indexes (its `vector` type; halfvec goes further).
pub const HNSW_MAX_DIMENSIONS: usize = 2_000;
/// Advisory lock of the DDL below, so replicas starting together do not race on it.
const DDL_LOCK: i64 = 0x7067_7663; // "pgvc"

/// Whether this database can use pgvector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgVector {
    /// Ready: the extension at this version, the column and its trigger.
    Enabled { version: String },
    /// Not here, and why (not Postgres, not installed on the server, no permission…).
    Unavailable(String),
}

/// An SQL string literal: quotes doubled. Only for names from the configuration (model
/// keys), never for user input; the query's values are bound.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The index's name: Postgres cuts names at 63 bytes, so the model is hashed.
fn index_name(model: &str, dim: usize) -> String {
    let h = Sha256::digest(model.as_bytes());
    format!("chunk_embeddings_hnsw_{}_{dim}", hex::encode(&h[..6]))
}

/// pgvector's text form of a vector: `[x,y,…]` (f32 `Display` round-trips exactly).
pub fn vector_text(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 12 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        // A NaN or infinity is refused by pgvector; a zero stands in (it costs one vector's
        // rank, never the statement).
        let x = if x.is_finite() { *x } else { 0.0 };
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl Store {
    /// Makes pgvector usable when the server has it: creates the extension (when this role
    /// may), the `embedding` column and the trigger that empties it when a vector is
    /// replaced. Idempotent; anything missing is reported as `Unavailable`, not an error.
    pub async fn pgvector_enable(&self) -> Result<PgVector> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(PgVector::Unavailable("not Postgres".into()));
        };
        let available: Option<String> = sqlx::query_scalar(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'",
        )
        .fetch_optional(pool)
        .await?;
        if available.is_none() {
            return Ok(PgVector::Unavailable(
                "the server has no `vector` extension (pgvector) installed".into(),
            ));
        }
        let ddl = async {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(DDL_LOCK)
                .execute(&mut *tx)
                .await?;
            for statement in [
                "CREATE EXTENSION IF NOT EXISTS vector",
                "ALTER TABLE chunk_embeddings ADD COLUMN IF NOT EXISTS embedding vector",
                "CREATE OR REPLACE FUNCTION troupe_embedding_stale() RETURNS trigger
                 LANGUAGE plpgsql AS $$ BEGIN NEW.embedding := NULL; RETURN NEW; END $$",
                "DROP TRIGGER IF EXISTS chunk_embeddings_stale ON chunk_embeddings",
                "CREATE TRIGGER chunk_embeddings_stale BEFORE UPDATE OF vector
                 ON chunk_embeddings FOR EACH ROW EXECUTE FUNCTION troupe_embedding_stale()",
            ] {
                sqlx::query(statement).execute(&mut *tx).await?;
            }
            tx.commit().await
        };
        if let Err(e) = ddl.await {
            return Ok(PgVector::Unavailable(format!(
                "the `vector` extension could not be set up: {e}"
            )));
        }
        let version: String =
            sqlx::query_scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
                .fetch_one(pool)
                .await?;
        Ok(PgVector::Enabled { version })
    }

    /// Copies up to `limit` of `model`'s vectors stored by change `from` or later and not
    /// yet in the `embedding` column into it. Returns the sizes seen, how many rows it read
    /// and the last change among them. A row replaced meanwhile is left for its own change
    /// (`change_seq` must still match). Sizes pgvector cannot hold (0, over 16,000) are
    /// never read, so one bad row cannot stop the others.
    pub async fn pgvector_fill(
        &self,
        model: &str,
        from: i64,
        limit: usize,
    ) -> Result<(Vec<usize>, usize, i64)> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok((Vec::new(), 0, from));
        };
        let rows: Vec<(String, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT chunk_id, change_seq, vector FROM chunk_embeddings
             WHERE model = $1 AND change_seq >= $2 AND embedding IS NULL
               AND dim BETWEEN 1 AND 16000
             ORDER BY change_seq LIMIT $3",
        )
        .bind(model)
        .bind(from)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await?;
        let mut dims: Vec<usize> = rows.iter().map(|(_, _, v)| v.len() / 4).collect();
        dims.sort_unstable();
        dims.dedup();
        let mut ids = Vec::with_capacity(rows.len());
        let mut seqs = Vec::with_capacity(rows.len());
        let mut texts = Vec::with_capacity(rows.len());
        for (id, seq, bytes) in &rows {
            ids.push(id.as_str());
            seqs.push(*seq);
            texts.push(vector_text(&floats(bytes)));
        }
        if !rows.is_empty() {
            sqlx::query(
                "UPDATE chunk_embeddings e SET embedding = CAST(u.v AS vector)
                 FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u(id, seq, v)
                 WHERE e.model = $1 AND e.chunk_id = u.id AND e.change_seq = u.seq",
            )
            .bind(model)
            .bind(&ids)
            .bind(&seqs)
            .bind(&texts)
            .execute(pool)
            .await?;
        }
        let last = rows.last().map_or(from, |(_, seq, _)| *seq);
        Ok((dims, rows.len(), last))
    }

    /// Creates the HNSW index of `model`'s vectors of size `dim` when missing (cosine
    /// distance, pgvector's default build parameters). It blocks writes to
    /// `chunk_embeddings` while it builds, once per model and size.
    pub async fn pgvector_ensure_index(&self, model: &str, dim: usize) -> Result<()> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(());
        };
        let sql = format!(
            "CREATE INDEX IF NOT EXISTS {name} ON chunk_embeddings
             USING hnsw ((embedding::vector({dim})) vector_cosine_ops)
             WHERE model = {model} AND dim = {dim}",
            name = index_name(model, dim),
            model = literal(model),
        );
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(DDL_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The `k` vectors of `model` nearest to `query` among `agent`'s in `scope` and the
    /// agent-wide ones, through the HNSW index: `(chunk id, cosine)`, best first.
    /// `ef_search` is the candidate list; iterative scanning goes on past it when the scope
    /// filter removes too many (pgvector 0.8's `relaxed_order`, re-sorted here).
    pub async fn pgvector_nearest(
        &self,
        model: &str,
        agent: &AgentId,
        scope: &Scope,
        query: &[f32],
        k: usize,
        ef_search: usize,
    ) -> Result<Vec<(String, f32)>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(Vec::new());
        };
        let dim = query.len();
        let sql = format!(
            "SELECT chunk_id, 1 - (embedding::vector({dim}) <=> CAST($1 AS vector({dim}))) AS score
             FROM chunk_embeddings
             WHERE model = {model} AND dim = {dim} AND embedding IS NOT NULL
               AND agent_id = $2 AND (scope = '' OR scope = $3)
             ORDER BY embedding::vector({dim}) <=> CAST($1 AS vector({dim})) LIMIT $4",
            model = literal(model),
        );
        let mut tx = pool.begin().await?;
        sqlx::query(
            "SELECT set_config('hnsw.ef_search', $1, true),
                    set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        )
        .bind(ef_search.max(k).min(1_000).to_string())
        .execute(&mut *tx)
        .await?;
        let mut rows: Vec<(String, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(vector_text(query))
            .bind(agent)
            .bind(scope)
            .bind(i64::try_from(k).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(rows.into_iter().map(|(id, s)| (id, s as f32)).collect())
    }

    /// The plan Postgres picks for [`Store::pgvector_nearest`]'s query (for tests that check
    /// the index is used).
    #[cfg(test)]
    pub async fn pgvector_plan(&self, model: &str, dim: usize) -> Result<String> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(String::new());
        };
        let zero = vector_text(&vec![0.0; dim]);
        let sql = format!(
            "EXPLAIN SELECT chunk_id FROM chunk_embeddings
             WHERE model = {model} AND dim = {dim} AND embedding IS NOT NULL
               AND agent_id = 'a' AND (scope = '' OR scope = 'web:r')
             ORDER BY embedding::vector({dim}) <=> CAST('{zero}' AS vector({dim})) LIMIT 10",
            model = literal(model),
        );
        let mut tx = pool.begin().await?;
        // Tiny test tables: without these the planner rightly prefers a scan and a sort.
        for setting in [
            "SET LOCAL enable_seqscan = off",
            "SET LOCAL enable_sort = off",
        ] {
            sqlx::query(setting).execute(&mut *tx).await?;
        }
        let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_names_are_safe() {
        assert_eq!(literal("it's"), "'it''s'");
        let name = index_name(&"m".repeat(500), 384);
        assert!(name.len() < 63 && name.ends_with("_384"));
        assert_ne!(index_name("a", 384), index_name("b", 384));
        assert_eq!(vector_text(&[1.0, -0.5, f32::NAN]), "[1,-0.5,0]");
    }
}
