-- Per-room memory beyond the recent window: the rolling summary of each room, and facts
-- learned about users. Keep in step with migrations/postgres/0004_memory.sql.

-- One summary per room: what the model made of the messages up to `through_message_id`
-- (a messages.id). It only ever moves forward: a write that would not advance it is refused,
-- so two replicas racing on one room cannot roll it back.
CREATE TABLE room_summaries (
    agent_id           TEXT    NOT NULL,
    room               TEXT    NOT NULL,
    summary            TEXT    NOT NULL,
    through_message_id INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (agent_id, room)
);

-- Durable facts about a user, per agent, recalled in every room of that agent on the same
-- platform. `room` and `source_message_id` say where it was learned (for operators).
CREATE TABLE user_facts (
    id                INTEGER PRIMARY KEY,
    agent_id          TEXT    NOT NULL,
    platform          TEXT    NOT NULL,
    user_id           TEXT    NOT NULL,
    fact              TEXT    NOT NULL,
    room              TEXT    NOT NULL,
    source_message_id INTEGER,
    created_at_ms     INTEGER NOT NULL,
    UNIQUE (agent_id, platform, user_id, fact)
);
CREATE INDEX user_facts_by_user ON user_facts (agent_id, platform, user_id, created_at_ms);

-- How far fact extraction has read a user's messages (a messages.id); forward only.
CREATE TABLE user_fact_progress (
    agent_id           TEXT    NOT NULL,
    platform           TEXT    NOT NULL,
    user_id            TEXT    NOT NULL,
    through_message_id INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (agent_id, platform, user_id)
);

-- A user's messages to one agent, across rooms, in order: what fact extraction reads.
CREATE INDEX messages_by_author ON messages (agent_id, author_id, id);
