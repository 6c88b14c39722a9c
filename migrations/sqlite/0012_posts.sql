-- Autonomous posts (issue 34, docs/posts.md): the schedules, each run's claim, and the
-- posts made (the same rows: a run that posted keeps its text, so the persona's recent
-- posts, the console and GET /api/agents/{agent}/posts read them back).
-- Keep in step with migrations/postgres/0012_posts.sql.

-- One row per schedule of a persona: `env` (Farcaster's ENABLE_POST), `file`
-- (settings.troupe.posts) or `api` (POST /api/agents/{agent}/posts). `spec` is the
-- schedule's JSON as troupe parsed it; `next_run_ms` the next run, moved forward by the
-- replica that claims a run (a conditional UPDATE on the value it read).
CREATE TABLE post_schedules (
    agent_id      TEXT NOT NULL,
    id            TEXT NOT NULL,
    source        TEXT NOT NULL CHECK (source IN ('env', 'file', 'api')),
    room          TEXT NOT NULL,
    spec          TEXT NOT NULL,
    next_run_ms   INTEGER NOT NULL,
    last_run_ms   INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, id)
);
CREATE INDEX post_schedules_due ON post_schedules (next_run_ms);

-- One row per claimed run, unique per schedule and run time: the claim (`claimed`, with
-- a lease that another replica may take over once it expires), then what came of it:
-- `queued` (its outbox entry is `outbox_id`), `dry_run` (kept, not sent), `skipped` (a
-- muted room, a spent budget, too close to a recent post) or `failed`.
CREATE TABLE post_runs (
    id               INTEGER PRIMARY KEY,
    agent_id         TEXT NOT NULL,
    schedule_id      TEXT NOT NULL,
    room             TEXT NOT NULL,
    run_at_ms        INTEGER NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('claimed', 'queued', 'dry_run', 'skipped', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 1,
    claimed_until_ms INTEGER,
    text             TEXT,
    reason           TEXT,
    outbox_id        INTEGER,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    UNIQUE (agent_id, schedule_id, run_at_ms)
);
CREATE INDEX post_runs_recent ON post_runs (agent_id, id);
CREATE INDEX post_runs_claimed ON post_runs (state, claimed_until_ms);

-- Spend counts a post's draft as purpose 'post'. 0007 listed the purposes in a CHECK;
-- SQLite cannot change one in place, so the table is rebuilt without it: the code's
-- `spend::Purpose` is the one writer and its only source of names, and a list here would
-- have to be rebuilt again by every purpose added later.
CREATE TABLE usage_records_new (
    id                INTEGER PRIMARY KEY,
    agent_id          TEXT    NOT NULL,
    room              TEXT    NOT NULL,
    user_key          TEXT    NOT NULL,
    provider          TEXT    NOT NULL,
    model             TEXT    NOT NULL,
    purpose           TEXT    NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens     INTEGER NOT NULL,
    estimated         BOOLEAN NOT NULL,
    cost_micros       INTEGER NOT NULL,
    day               INTEGER NOT NULL,
    created_at_ms     INTEGER NOT NULL
);
INSERT INTO usage_records_new
    SELECT id, agent_id, room, user_key, provider, model, purpose, prompt_tokens,
           completion_tokens, cached_tokens, estimated, cost_micros, day, created_at_ms
    FROM usage_records;
DROP TABLE usage_records;
ALTER TABLE usage_records_new RENAME TO usage_records;
CREATE INDEX usage_records_by_time ON usage_records (created_at_ms);
CREATE INDEX usage_records_by_agent ON usage_records (agent_id, day);
