-- Reactions as feedback on replies (issue 32, docs/media.md "Reactions and feedback").
-- Keep in step with migrations/sqlite/0014_feedback.sql.

-- The platform messages each delivered reply became, so that a reaction on a message is
-- known to be on a persona's reply with one key look-up. `chat` is where the message lives
-- on its platform (the room's `send_to`, else its id), as a reaction names it; `room` is
-- the room key the reply belongs to. Filled by the trigger below when the outbox records a
-- delivery (one at a time or in a batch); only platforms with reactions are kept.
CREATE TABLE reply_messages (
    agent_id   TEXT   NOT NULL,
    platform   TEXT   NOT NULL,
    chat       TEXT   NOT NULL,
    message_id TEXT   NOT NULL,
    room       TEXT   NOT NULL,
    outbox_id  BIGINT NOT NULL,
    PRIMARY KEY (agent_id, platform, chat, message_id)
);

CREATE FUNCTION outbox_reply_messages() RETURNS trigger AS $$
BEGIN
    INSERT INTO reply_messages (agent_id, platform, chat, message_id, room, outbox_id)
    SELECT NEW.agent_id,
           NEW.outbound->'room'->>'platform',
           COALESCE(NEW.outbound->'room'->>'send_to', NEW.outbound->'room'->>'id'),
           ids.value,
           (NEW.outbound->'room'->>'platform') || ':' || (NEW.outbound->'room'->>'id'),
           NEW.id
    FROM jsonb_array_elements_text(NEW.platform_ids) AS ids(value)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER outbox_reply_messages AFTER UPDATE OF platform_ids ON outbox
FOR EACH ROW
WHEN (NEW.platform_ids IS NOT NULL
      AND jsonb_typeof(NEW.platform_ids) = 'array'
      AND NEW.outbound->'room'->>'platform' IN ('discord', 'telegram'))
EXECUTE FUNCTION outbox_reply_messages();

-- One row per person per reply: their latest 👍 (1) or 👎 (-1). Taking the reaction back
-- deletes the row.
CREATE TABLE feedback (
    agent_id      TEXT    NOT NULL,
    room          TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    value         INTEGER NOT NULL CHECK (value IN (-1, 1)),
    outbox_id     BIGINT  NOT NULL,
    created_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (agent_id, room, message_id, user_id)
);
CREATE INDEX feedback_by_outbox ON feedback (outbox_id);
