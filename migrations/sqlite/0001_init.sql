-- troupe storage, SQLite dialect. Keep in step with migrations/postgres/0001_init.sql:
-- same tables, columns and indexes; only the types differ (INTEGER/TEXT here, BIGINT/JSONB there).
-- Times are milliseconds since the epoch. JSON columns hold serde_json text.

-- One row per persona id. Character files on disk are the authority on which agents exist;
-- this table records them, so other tables do not reference it (a persona removed from disk
-- keeps its history, and a message journaled before the agent row is written is still valid).
CREATE TABLE agents (
    id            TEXT PRIMARY KEY NOT NULL,
    name          TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

-- What an agent knows about a room. `room` is the RoomKey string, `platform:room`.
CREATE TABLE rooms (
    agent_id       TEXT NOT NULL,
    room           TEXT NOT NULL,
    platform       TEXT NOT NULL,
    name           TEXT,
    last_active_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, room)
);
CREATE INDEX rooms_by_activity ON rooms (agent_id, last_active_ms);

-- People as the platforms describe them; a platform user id is global to its platform.
CREATE TABLE users (
    platform     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    name         TEXT NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
);

-- Every accepted inbound message. The unique key is the deduplication rule.
CREATE TABLE journal (
    id                  INTEGER PRIMARY KEY,
    agent_id            TEXT NOT NULL,
    platform            TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    room                TEXT NOT NULL,
    inbound             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    UNIQUE (agent_id, platform, platform_message_id)
);
CREATE INDEX journal_by_state ON journal (state, id);

-- Room memory: what people said and what the persona replied.
CREATE TABLE messages (
    id            INTEGER PRIMARY KEY,
    agent_id      TEXT NOT NULL,
    room          TEXT NOT NULL,
    journal_id    INTEGER REFERENCES journal (id) ON DELETE SET NULL,
    author_id     TEXT NOT NULL,
    author_name   TEXT NOT NULL,
    text          TEXT NOT NULL,
    from_agent    BOOLEAN NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX messages_by_room ON messages (agent_id, room, id);
CREATE INDEX messages_by_journal ON messages (journal_id);

-- Replies to deliver. A claim is a lease: `claimed_until_ms` in the past means unclaimed.
CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY,
    agent_id         TEXT NOT NULL,
    journal_id       INTEGER REFERENCES journal (id) ON DELETE SET NULL,
    outbound         TEXT NOT NULL,
    state            TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    not_before_ms    INTEGER NOT NULL DEFAULT 0,
    claimed_until_ms INTEGER,
    last_error       TEXT,
    platform_ids     TEXT,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    delivered_at_ms  INTEGER
);
CREATE INDEX outbox_due ON outbox (state, not_before_ms);
CREATE INDEX outbox_by_journal ON outbox (journal_id);
