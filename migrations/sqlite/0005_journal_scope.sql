-- no-transaction
-- The journal's dedupe key gains the room and, for the Web platform, the caller; and the
-- database gets an installation id and a record of the apologies sent to rooms. Keep in step
-- with migrations/postgres/0005_journal_scope.sql.
--
-- Why `-- no-transaction` (the line above must stay first): changing a UNIQUE constraint in
-- SQLite means rebuilding the table, and dropping the old `journal` with foreign keys on
-- would run `ON DELETE SET NULL` on every `messages` and `outbox` row that points at it.
-- `PRAGMA foreign_keys` is a no-op inside a transaction, so this script turns it off first
-- and opens its own transaction. Ids are copied as they are, so every reference stays valid.
-- The script can run again after a crash between its COMMIT and sqlx's bookkeeping: each
-- step is written to be repeatable.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

DROP TABLE IF EXISTS journal_rebuild;
-- `caller`: who the key belongs to besides the room. Platforms assign message ids and
-- authenticate authors, so it is '' for them; on the Web platform both the room id and the
-- message id are chosen by the HTTP caller, so it is the caller's `userId`.
CREATE TABLE journal_rebuild (
    id                  INTEGER PRIMARY KEY,
    agent_id            TEXT NOT NULL,
    platform            TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    room                TEXT NOT NULL,
    caller              TEXT NOT NULL DEFAULT '',
    inbound             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    UNIQUE (agent_id, platform, room, caller, platform_message_id)
);
INSERT INTO journal_rebuild
    (id, agent_id, platform, platform_message_id, room, caller, inbound, state, attempts,
     last_error, created_at_ms, updated_at_ms)
SELECT id, agent_id, platform, platform_message_id, room,
       CASE WHEN platform = 'web' THEN COALESCE(json_extract(inbound, '$.author.id'), '') ELSE '' END,
       inbound, state, attempts, last_error, created_at_ms, updated_at_ms
FROM journal;
DROP TABLE journal;
ALTER TABLE journal_rebuild RENAME TO journal;
CREATE INDEX IF NOT EXISTS journal_by_state ON journal (state, id);

-- One row: this database's random id. The NATS bus puts it in every `Nats-Msg-Id`, since
-- journal ids start again at 1 in a fresh database that may share a NATS server (and its
-- dedupe window) with an earlier one.
CREATE TABLE IF NOT EXISTS installation (
    one           INTEGER PRIMARY KEY NOT NULL DEFAULT 1 CHECK (one = 1),
    id            TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
INSERT OR IGNORE INTO installation (one, id, created_at_ms)
VALUES (1, lower(hex(randomblob(16))), CAST(unixepoch('subsec') * 1000 AS INTEGER));

-- When a room last got the apology for a message troupe gave up on, so that a burst of
-- give-ups (or several replicas giving up) says sorry once.
CREATE TABLE IF NOT EXISTS room_apologies (
    agent_id         TEXT NOT NULL,
    room             TEXT NOT NULL,
    journal_id       INTEGER NOT NULL,
    apologized_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, room)
);

COMMIT;
PRAGMA foreign_keys = ON;
