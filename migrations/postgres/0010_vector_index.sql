-- The vector index moves out of the per-query scan (gateway/src/knowledge/vectors.rs:
-- pgvector's HNSW when the extension is available, else an approximate index in the
-- gateway that follows the database). Keep in step with
-- migrations/sqlite/0010_vector_index.sql.
--
-- pgvector itself is not required here: the gateway creates the extension, the `embedding`
-- column and one HNSW index per model when it starts and finds the extension available
-- (storage/knowledge.rs, `pgvector_enable`), so a database migrated without it gains the
-- index path once the extension is installed.

-- One row per write of vectors (`put`: a batch stored) or removal of an agent's vectors
-- for a model (`drop`: before re-embedding). Each stored vector carries the `seq` of the
-- write that stored it last (`chunk_embeddings.change_seq`). Writers take a
-- transaction-scoped advisory lock before taking a `seq`, so rows become visible in `seq`
-- order and a follower never skips one that commits late.
CREATE TABLE embedding_changes (
    seq      BIGSERIAL PRIMARY KEY,
    model    TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    op       TEXT NOT NULL
);

-- 0: stored before this migration; a rebuild reads every row anyway.
ALTER TABLE chunk_embeddings ADD COLUMN change_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX chunk_embeddings_by_change ON chunk_embeddings (model, change_seq);
CREATE INDEX embedding_changes_by_model ON embedding_changes (model, seq);
