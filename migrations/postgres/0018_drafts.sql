-- Approval before posting (issue 47, docs/posts.md): a schedule with `approve: true`
-- keeps its post as a draft (`post_runs.state = 'draft'`) until an operator approves,
-- edits or rejects it, or it expires. The draft is the run's own row: its id is the run's,
-- and approving it moves it from `draft` to `queued` and inserts its outbox entry in one
-- transaction, conditional on `state = 'draft'` and the expiry, so of two approvers (two
-- replicas, two clicks) one queues it and the other gets 409: the second UPDATE waits on
-- the first's row lock and then matches no row.
-- Keep in step with migrations/sqlite/0018_drafts.sql.
ALTER TABLE post_runs DROP CONSTRAINT IF EXISTS post_runs_state_check;
ALTER TABLE post_runs ADD CONSTRAINT post_runs_state_check
    CHECK (state IN ('claimed', 'queued', 'dry_run', 'skipped', 'failed',
                     'draft', 'rejected', 'expired'));
ALTER TABLE post_runs ADD COLUMN expires_at_ms BIGINT;
ALTER TABLE post_runs ADD COLUMN drafted_text TEXT;
ALTER TABLE post_runs ADD COLUMN decided_by TEXT;
ALTER TABLE post_runs ADD COLUMN decided_at_ms BIGINT;
CREATE INDEX post_runs_drafts ON post_runs (state, expires_at_ms);
