-- Knowledge: documents uploaded for an agent (scope '') or for one room (scope = the RoomKey
-- string), their chunks, a full-text index over the chunks, and embedding vectors.
-- Keep in step with migrations/sqlite/0003_knowledge.sql. Postgres ranks with its own
-- full-text search (tsvector, GIN, ts_rank_cd), which is not literally BM25.

CREATE TABLE documents (
    id            TEXT PRIMARY KEY NOT NULL,
    agent_id      TEXT NOT NULL,
    scope         TEXT NOT NULL DEFAULT '',
    source        TEXT NOT NULL,
    content_type  TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    origin        TEXT NOT NULL,
    bytes         BIGINT NOT NULL,
    chunk_count   BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (agent_id, scope, content_hash)
);
CREATE INDEX documents_by_origin ON documents (agent_id, origin);

CREATE TABLE chunks (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    idx         BIGINT NOT NULL,
    text        TEXT NOT NULL,
    tsv         TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX chunks_by_document ON chunks (document_id, idx);
CREATE INDEX chunks_by_scope ON chunks (agent_id, scope);
CREATE INDEX chunks_tsv ON chunks USING GIN (tsv);

-- Vectors as little-endian f32 bytes; pgvector is not assumed, so similarity is computed
-- in the gateway (see docs/knowledge.md).
CREATE TABLE chunk_embeddings (
    chunk_id TEXT NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    model    TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    scope    TEXT NOT NULL,
    dim      BIGINT NOT NULL,
    vector   BYTEA NOT NULL,
    PRIMARY KEY (chunk_id, model)
);
CREATE INDEX chunk_embeddings_by_scope ON chunk_embeddings (agent_id, model, scope);
