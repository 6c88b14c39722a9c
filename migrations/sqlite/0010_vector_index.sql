-- The vector index moves out of the per-query scan (gateway/src/knowledge/vectors.rs: an
-- approximate index per persona and scope, a cache that follows the database). Keep in step
-- with migrations/postgres/0010_vector_index.sql.

-- One row per write of vectors (`put`: a batch stored) or removal of an agent's vectors
-- for a model (`drop`: before re-embedding). Each stored vector carries the `seq` of the
-- write that stored it last (`chunk_embeddings.change_seq`), so an index replays the rows
-- after the last change it applied. AUTOINCREMENT so a `seq` is never reused.
CREATE TABLE embedding_changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    model    TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    op       TEXT NOT NULL
);

-- 0: stored before this migration; a rebuild reads every row anyway.
ALTER TABLE chunk_embeddings ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX chunk_embeddings_by_change ON chunk_embeddings (model, change_seq);
CREATE INDEX embedding_changes_by_model ON embedding_changes (model, seq);
