-- Knowledge: documents uploaded for an agent (scope '') or for one room (scope = the RoomKey
-- string), their chunks, a full-text index over the chunks, and embedding vectors.
-- Keep in step with migrations/postgres/0003_knowledge.sql.

-- `id` is derived from (agent, scope, content hash), so an identical upload finds its row.
-- `origin` says who added it: 'upload' (HTTP), 'cli' (troupe ingest), 'character' (the
-- character file's `knowledge`, reconciled at each load), 'attachment' (a chat attachment).
CREATE TABLE documents (
    id            TEXT PRIMARY KEY NOT NULL,
    agent_id      TEXT NOT NULL,
    scope         TEXT NOT NULL DEFAULT '',
    source        TEXT NOT NULL,
    content_type  TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    origin        TEXT NOT NULL,
    bytes         INTEGER NOT NULL,
    chunk_count   INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (agent_id, scope, content_hash)
);
CREATE INDEX documents_by_origin ON documents (agent_id, origin);

-- `seq` is the FTS rowid; `id` (document id + ':' + index) is the stable public name.
-- agent_id and scope are copied from the document so a search filters without a join.
CREATE TABLE chunks (
    seq         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL,
    scope       TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    text        TEXT NOT NULL
);
CREATE INDEX chunks_by_document ON chunks (document_id, idx);
CREATE INDEX chunks_by_scope ON chunks (agent_id, scope);

-- BM25 over chunk text (external content: the text is stored once, in `chunks`). Porter
-- stemming over unicode61 tokens, so "lighthouses" matches "lighthouse".
CREATE VIRTUAL TABLE chunks_fts USING fts5 (
    text,
    content = 'chunks',
    content_rowid = 'seq',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text) VALUES (new.seq, new.text);
END;
CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.seq, old.text);
END;

-- One vector per chunk and embedding model: little-endian f32, `dim` of them. A query only
-- reads the vectors of the model configured now, so changing the model needs no wipe.
CREATE TABLE chunk_embeddings (
    chunk_id TEXT NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    model    TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    scope    TEXT NOT NULL,
    dim      INTEGER NOT NULL,
    vector   BLOB NOT NULL,
    PRIMARY KEY (chunk_id, model)
);
CREATE INDEX chunk_embeddings_by_scope ON chunk_embeddings (agent_id, model, scope);
