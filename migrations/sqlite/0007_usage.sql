-- Spend accounting (docs/spend.md): one row per model call, daily rollups per persona,
-- room and user (the counters budgets are checked against, shared by every replica), and
-- the budget notices already sent. Keep in step with migrations/postgres/0007_usage.sql.

-- Raw records, kept TROUPE_SPEND_RETENTION_DAYS. `room` is the room key
-- (`platform:room`) and `user_key` the user (`platform:user`), both '' for calls that
-- belong to no room or user. `estimated`: the provider reported no usage, the tokens were
-- estimated from the text. `cost_micros`: US dollars times 10^6.
CREATE TABLE usage_records (
    id                INTEGER PRIMARY KEY,
    agent_id          TEXT    NOT NULL,
    room              TEXT    NOT NULL,
    user_key          TEXT    NOT NULL,
    provider          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    purpose           TEXT    NOT NULL CHECK (purpose IN ('reply', 'summary', 'facts', 'embedding')),
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    estimated         BOOLEAN NOT NULL,
    cost_micros       INTEGER NOT NULL,
    day               INTEGER NOT NULL,
    created_at_ms     INTEGER NOT NULL
);
CREATE INDEX usage_records_by_time ON usage_records (created_at_ms);
CREATE INDEX usage_records_by_agent ON usage_records (agent_id, day);

-- Daily rollups, kept for good (one row per persona, room and user a day). `day` counts
-- days since 1970-01-01 (UTC). `scope` is 'agent' (`scope_key` ''), 'room' (the room key)
-- or 'user' (`platform:user`).
CREATE TABLE usage_daily (
    agent_id          TEXT    NOT NULL,
    day               INTEGER NOT NULL,
    scope             TEXT    NOT NULL CHECK (scope IN ('agent', 'room', 'user')),
    scope_key         TEXT    NOT NULL,
    calls             INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    cost_micros       INTEGER NOT NULL,
    PRIMARY KEY (agent_id, day, scope, scope_key)
);
CREATE INDEX usage_daily_by_scope ON usage_daily (agent_id, scope, day);

-- One notice per budget window: the first replica to insert the row tells the room.
-- `window_start` is the window's first day.
CREATE TABLE budget_notices (
    agent_id     TEXT    NOT NULL,
    budget       TEXT    NOT NULL,
    scope_key    TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    sent_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (agent_id, budget, scope_key, window_start)
);
