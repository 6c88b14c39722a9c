-- Approval before posting (issue 47, docs/posts.md): a schedule with `approve: true`
-- keeps its post as a draft (`post_runs.state = 'draft'`) until an operator approves,
-- edits or rejects it, or it expires. The draft is the run's own row: its id is the run's,
-- and approving it moves it from `draft` to `queued` and inserts its outbox entry in one
-- transaction, conditional on `state = 'draft'` and the expiry, so of two approvers (two
-- replicas, two clicks) one queues it and the other gets 409.
-- Keep in step with migrations/postgres/0018_drafts.sql.
--
-- New columns: `expires_at_ms` (a draft not approved by then is never sent),
-- `drafted_text` (the model's text when an operator edited it), `decided_by` and
-- `decided_at_ms` (who approved or rejected it: `api`, `console`, `telegram:<user id>`…).
-- SQLite cannot change a CHECK in place: the table is rebuilt with the three new states.
CREATE TABLE post_runs_new (
    id               INTEGER PRIMARY KEY,
    agent_id         TEXT NOT NULL,
    schedule_id      TEXT NOT NULL,
    room             TEXT NOT NULL,
    run_at_ms        INTEGER NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('claimed', 'queued', 'dry_run', 'skipped', 'failed',
                                                    'draft', 'rejected', 'expired')),
    attempts         INTEGER NOT NULL DEFAULT 1,
    claimed_until_ms INTEGER,
    text             TEXT,
    reason           TEXT,
    outbox_id        INTEGER,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER,
    drafted_text     TEXT,
    decided_by       TEXT,
    decided_at_ms    INTEGER,
    UNIQUE (agent_id, schedule_id, run_at_ms)
);
INSERT INTO post_runs_new
    (id, agent_id, schedule_id, room, run_at_ms, state, attempts, claimed_until_ms, text,
     reason, outbox_id, created_at_ms, updated_at_ms)
    SELECT id, agent_id, schedule_id, room, run_at_ms, state, attempts, claimed_until_ms, text,
           reason, outbox_id, created_at_ms, updated_at_ms
    FROM post_runs;
DROP TABLE post_runs;
ALTER TABLE post_runs_new RENAME TO post_runs;
CREATE INDEX post_runs_recent ON post_runs (agent_id, id);
CREATE INDEX post_runs_claimed ON post_runs (state, claimed_until_ms);
CREATE INDEX post_runs_drafts ON post_runs (state, expires_at_ms);
