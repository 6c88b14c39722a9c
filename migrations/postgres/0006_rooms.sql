-- Room controls that people set from the chat (issue 15, docs/rooms.md): whether the persona
-- is muted in a room and until when, whether it follows the room (answers unaddressed
-- messages), and when the room's memory was last forgotten. One row per (agent, room), made
-- the first time someone steers the room; a room without a row has the defaults (not muted,
-- not following). Stored, not cached, so that every replica sees the same state and a
-- restart or a persona reload keeps it. Keep in step with migrations/sqlite/0006_rooms.sql.
CREATE TABLE room_state (
    agent_id          TEXT    NOT NULL,
    room              TEXT    NOT NULL,
    -- Muted while this is in the future; NULL is not muted. "Until unmuted" is the largest
    -- time (i64::MAX), so one comparison answers both.
    muted_until_ms    BIGINT,
    following         BOOLEAN NOT NULL DEFAULT FALSE,
    -- Bot messages in a row in the room, without a human, as this persona saw them (its own
    -- replies included); a human message sets it back to 0. Past TROUPE_BOT_TURNS the
    -- persona answers no bot.
    bot_streak        BIGINT NOT NULL DEFAULT 0,
    forgotten_at_ms   BIGINT,
    -- Who last changed the row, as `platform:user`, for operators.
    updated_by        TEXT,
    updated_at_ms     BIGINT NOT NULL,
    PRIMARY KEY (agent_id, room)
);
