-- The keyword index moves out of the database (gateway/src/knowledge/index.rs: tantivy on
-- local disk, a cache rebuilt from `chunks`). Keep in step with
-- migrations/postgres/0008_knowledge_changes.sql.

-- One row per stored or deleted document, written in the same transaction as the chunks:
-- each replica's index replays the rows after the last `seq` it applied. AUTOINCREMENT so
-- a `seq` is never reused.
CREATE TABLE knowledge_changes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id TEXT NOT NULL,
    op          TEXT NOT NULL
);

-- FTS5 is no longer read: dropping it takes its indexing cost off every ingest.
DROP TRIGGER IF EXISTS chunks_fts_insert;
DROP TRIGGER IF EXISTS chunks_fts_delete;
DROP TABLE IF EXISTS chunks_fts;
