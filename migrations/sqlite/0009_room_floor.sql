-- Several personas of one troupe in one room (issue 15, docs/rooms.md, "A troupe in one
-- room"). `room_floor` is the room's, not a persona's: which persona a person last addressed
-- there, and the turn for answering in turn. `room_claims` holds, per message, the one
-- persona that answers it when nobody addressed it (follow mode): the first persona to
-- handle the message writes the arbiter's choice with INSERT .. ON CONFLICT DO NOTHING and
-- every persona, on every replica, reads the same row back. `room_senders` records which
-- persona of the troupe wrote a message in the room, as the others heard it, so that a
-- reply to it is known as addressed to that persona. Keep in step with
-- migrations/postgres/0009_room_floor.sql.
CREATE TABLE room_floor (
    room            TEXT    NOT NULL PRIMARY KEY,
    last_addressed  TEXT,
    turn            INTEGER NOT NULL DEFAULT 0,
    updated_at_ms   INTEGER NOT NULL
);

CREATE TABLE room_claims (
    room            TEXT    NOT NULL,
    message_id      TEXT    NOT NULL,
    agent_id        TEXT    NOT NULL,
    claimed_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (room, message_id)
);

CREATE TABLE room_senders (
    room            TEXT    NOT NULL,
    message_id      TEXT    NOT NULL,
    agent_id        TEXT    NOT NULL,
    heard_at_ms     INTEGER NOT NULL,
    PRIMARY KEY (room, message_id)
);
