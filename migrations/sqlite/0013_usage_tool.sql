-- Tools (issue 33, docs/tools.md): a model call of a turn with tools that asked for tool
-- calls is recorded with purpose 'tool'. SQLite cannot alter a CHECK constraint, so the
-- table is rebuilt with the same columns and indexes. Keep in step with
-- migrations/postgres/0013_usage_tool.sql.
CREATE TABLE usage_records_new (
    id                INTEGER PRIMARY KEY,
    agent_id          TEXT    NOT NULL,
    room              TEXT    NOT NULL,
    user_key          TEXT    NOT NULL,
    provider          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    purpose           TEXT    NOT NULL CHECK (purpose IN ('reply', 'summary', 'facts', 'embedding', 'tool')),
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    estimated         BOOLEAN NOT NULL,
    cost_micros       INTEGER NOT NULL,
    day               INTEGER NOT NULL,
    created_at_ms     INTEGER NOT NULL
);
INSERT INTO usage_records_new SELECT * FROM usage_records;
DROP TABLE usage_records;
ALTER TABLE usage_records_new RENAME TO usage_records;
CREATE INDEX usage_records_by_time ON usage_records (created_at_ms);
CREATE INDEX usage_records_by_agent ON usage_records (agent_id, day);
