-- Access (issue 44, docs/access.md): pairing codes, approvals, and wrong approvals.
-- Keep in step with migrations/sqlite/0015_access.sql.

-- One row per persona, platform and sender who was refused or given a code: the code
-- (empty for a refusal), when it was said (a sender gets at most one a while) and whether
-- it may still be approved (`pending` 1; 0 once a newer code dropped it). Rows older than
-- a code's life are deleted as new ones come.
CREATE TABLE pairing_codes (
    agent_id      TEXT    NOT NULL,
    platform      TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    user_name     TEXT    NOT NULL,
    code          TEXT    NOT NULL,
    created_at_ms BIGINT  NOT NULL,
    expires_at_ms BIGINT  NOT NULL,
    pending       INTEGER NOT NULL,
    PRIMARY KEY (agent_id, platform, user_id)
);
CREATE INDEX pairing_codes_by_code ON pairing_codes (code);

-- Who was let in by a code (or by the operator), per persona, keyed `platform:user_id`.
CREATE TABLE access_approvals (
    agent_id       TEXT    NOT NULL,
    subject        TEXT    NOT NULL,
    user_name      TEXT    NOT NULL,
    approved_by    TEXT    NOT NULL,
    approved_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (agent_id, subject)
);

-- Wrong approvals, by where they were tried (a persona's owners, the API, the CLI): five
-- in ten minutes lock approval there for ten minutes.
CREATE TABLE pairing_failures (
    scope TEXT    NOT NULL,
    at_ms BIGINT  NOT NULL
);
CREATE INDEX pairing_failures_by_scope ON pairing_failures (scope, at_ms);
