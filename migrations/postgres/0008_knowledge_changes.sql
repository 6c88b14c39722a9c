-- The keyword index moves out of the database (gateway/src/knowledge/index.rs: tantivy on
-- local disk, a cache rebuilt from `chunks`). Keep in step with
-- migrations/sqlite/0008_knowledge_changes.sql.

-- One row per stored or deleted document, written in the same transaction as the chunks:
-- each replica's index replays the rows after the last `seq` it applied. Writers take a
-- transaction-scoped advisory lock before taking a `seq`, so rows become visible in `seq`
-- order and a reader never skips one that commits late.
CREATE TABLE knowledge_changes (
    seq         BIGSERIAL PRIMARY KEY,
    document_id TEXT NOT NULL,
    op          TEXT NOT NULL
);

-- The tsvector column and its GIN index are no longer read: dropping them takes their cost
-- off every ingest.
DROP INDEX IF EXISTS chunks_tsv;
ALTER TABLE chunks DROP COLUMN IF EXISTS tsv;
