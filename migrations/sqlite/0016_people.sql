-- One person across platforms (issue 44 item 6, docs/people.md).
-- Keep in step with migrations/postgres/0016_people.sql.

-- Accounts linked into one person, per persona. Only linked accounts have a row: an
-- account without one is a person of its own (`platform:user_id`). `person_id` is a random
-- `person:…` id, never an account's key, so it cannot collide with an unlinked account.
CREATE TABLE person_accounts (
    agent_id     TEXT    NOT NULL,
    platform     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    person_id    TEXT    NOT NULL,
    linked_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, platform, user_id)
);
CREATE INDEX person_accounts_person ON person_accounts (agent_id, person_id);

-- `/link` codes: one per issuing account (a new `/link` replaces it). `claimed_*` is the
-- account that entered it with `/link CODE` and has yet to confirm with `/link yes`.
CREATE TABLE link_codes (
    agent_id         TEXT    NOT NULL,
    code             TEXT    NOT NULL,
    platform         TEXT    NOT NULL,
    user_id          TEXT    NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
    claimed_platform TEXT,
    claimed_user_id  TEXT,
    PRIMARY KEY (agent_id, code)
);
CREATE UNIQUE INDEX link_codes_issuer ON link_codes (agent_id, platform, user_id);

-- Wrong `/link CODE` entries per entering account, in a window that starts at the first.
CREATE TABLE link_failures (
    agent_id        TEXT    NOT NULL,
    platform        TEXT    NOT NULL,
    user_id         TEXT    NOT NULL,
    failures        INTEGER NOT NULL,
    window_start_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, platform, user_id)
);
