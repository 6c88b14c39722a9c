-- The journal's dedupe key gains the room and, for the Web platform, the caller; and the
-- database gets an installation id and a record of the apologies sent to rooms. Keep in step
-- with migrations/sqlite/0005_journal_scope.sql (which rebuilds the table instead: SQLite
-- cannot change a UNIQUE constraint in place).

-- `caller`: who the key belongs to besides the room. Platforms assign message ids and
-- authenticate authors, so it is '' for them; on the Web platform both the room id and the
-- message id are chosen by the HTTP caller, so it is the caller's `userId`.
ALTER TABLE journal ADD COLUMN caller TEXT NOT NULL DEFAULT '';
UPDATE journal SET caller = COALESCE(inbound -> 'author' ->> 'id', '') WHERE platform = 'web';
ALTER TABLE journal DROP CONSTRAINT journal_agent_id_platform_platform_message_id_key;
ALTER TABLE journal ADD CONSTRAINT journal_dedupe
    UNIQUE (agent_id, platform, room, caller, platform_message_id);

-- One row: this database's random id. The NATS bus puts it in every `Nats-Msg-Id`, since
-- journal ids start again at 1 in a fresh database that may share a NATS server (and its
-- dedupe window) with an earlier one.
CREATE TABLE installation (
    one           INTEGER PRIMARY KEY NOT NULL DEFAULT 1 CHECK (one = 1),
    id            TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
INSERT INTO installation (one, id, created_at_ms)
VALUES (1, md5(random()::text || clock_timestamp()::text),
        (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT);

-- When a room last got the apology for a message troupe gave up on, so that a burst of
-- give-ups (or several replicas giving up) says sorry once.
CREATE TABLE room_apologies (
    agent_id         TEXT NOT NULL,
    room             TEXT NOT NULL,
    journal_id       BIGINT NOT NULL,
    apologized_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, room)
);
