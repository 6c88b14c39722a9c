-- Autonomous posts (issue 34, docs/posts.md): the schedules, each run's claim, and the
-- posts made (the same rows: a run that posted keeps its text, so the persona's recent
-- posts, the console and GET /api/agents/{agent}/posts read them back).
-- Keep in step with migrations/sqlite/0012_posts.sql.

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
    next_run_ms   BIGINT NOT NULL,
    last_run_ms   BIGINT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, id)
);
CREATE INDEX post_schedules_due ON post_schedules (next_run_ms);

-- One row per claimed run, unique per schedule and run time: the claim (`claimed`, with
-- a lease that another replica may take over once it expires), then what came of it:
-- `queued` (its outbox entry is `outbox_id`), `dry_run` (kept, not sent), `skipped` (a
-- muted room, a spent budget, too close to a recent post) or `failed`.
CREATE TABLE post_runs (
    id               BIGSERIAL PRIMARY KEY,
    agent_id         TEXT NOT NULL,
    schedule_id      TEXT NOT NULL,
    room             TEXT NOT NULL,
    run_at_ms        BIGINT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('claimed', 'queued', 'dry_run', 'skipped', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 1,
    claimed_until_ms BIGINT,
    text             TEXT,
    reason           TEXT,
    outbox_id        BIGINT,
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    UNIQUE (agent_id, schedule_id, run_at_ms)
);
CREATE INDEX post_runs_recent ON post_runs (agent_id, id);
CREATE INDEX post_runs_claimed ON post_runs (state, claimed_until_ms);

-- Spend counts a post's draft as purpose 'post'. 0007 listed the purposes in a CHECK; it
-- is dropped (as on SQLite, which must rebuild the table to do it): the code's
-- `spend::Purpose` is the one writer and its only source of names.
ALTER TABLE usage_records DROP CONSTRAINT IF EXISTS usage_records_purpose_check;
