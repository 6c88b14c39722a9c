-- Personas sharing one Discord bot speak through channel webhooks (issue 46, docs/discord.md
-- "A troupe on one bot"). Keep in step with migrations/postgres/0017_webhooks.sql.

-- The webhook of each channel, per bot account (`discord:<application id>`, else a one-way
-- digest of the token), so that a restart and every replica reuse it instead of making
-- another. `token` lets whoever holds it post as the webhook: it is a credential, kept in
-- the database like the connector state and never logged (docs/security.md).
CREATE TABLE discord_webhooks (
    account       TEXT    NOT NULL,
    channel_id    TEXT    NOT NULL,
    webhook_id    TEXT    NOT NULL,
    token         TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (account, channel_id)
);

-- Whose reply a message is, by room: a reply to a persona's webhook message is known as
-- addressed to that persona by every other persona of the troupe (`floor_and_sender`).
CREATE INDEX reply_messages_by_room ON reply_messages (room, message_id);
