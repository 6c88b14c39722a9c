-- Reactions as feedback on replies (issue 32, docs/media.md "Reactions and feedback").
-- Keep in step with migrations/postgres/0014_feedback.sql.

-- The platform messages each delivered reply became, so that a reaction on a message is
-- known to be on a persona's reply with one key look-up. `chat` is where the message lives
-- on its platform (the room's `send_to`, else its id: a Telegram forum topic's chat, a
-- Discord channel), as a reaction names it; `room` is the room key the reply belongs to.
-- Filled by the trigger below when the outbox records a delivery, so no code path that
-- marks a reply delivered (one at a time or in a batch) can forget it; only platforms with
-- reactions (Discord, Telegram) are kept, and an API reply costs nothing.
CREATE TABLE reply_messages (
    agent_id   TEXT    NOT NULL,
    platform   TEXT    NOT NULL,
    chat       TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    room       TEXT    NOT NULL,
    outbox_id  INTEGER NOT NULL,
    PRIMARY KEY (agent_id, platform, chat, message_id)
);

CREATE TRIGGER outbox_reply_messages AFTER UPDATE OF platform_ids ON outbox
WHEN NEW.platform_ids IS NOT NULL
     AND json_extract(NEW.outbound, '$.room.platform') IN ('discord', 'telegram')
BEGIN
    INSERT OR IGNORE INTO reply_messages (agent_id, platform, chat, message_id, room, outbox_id)
    SELECT NEW.agent_id,
           json_extract(NEW.outbound, '$.room.platform'),
           COALESCE(json_extract(NEW.outbound, '$.room.send_to'),
                    json_extract(NEW.outbound, '$.room.id')),
           ids.value,
           json_extract(NEW.outbound, '$.room.platform') || ':' || json_extract(NEW.outbound, '$.room.id'),
           NEW.id
    FROM json_each(NEW.platform_ids) AS ids;
END;

-- One row per person per reply: their latest 👍 (1) or 👎 (-1). Taking the reaction back
-- deletes the row.
CREATE TABLE feedback (
    agent_id      TEXT    NOT NULL,
    room          TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    value         INTEGER NOT NULL CHECK (value IN (-1, 1)),
    outbox_id     INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, room, message_id, user_id)
);
CREATE INDEX feedback_by_outbox ON feedback (outbox_id);
