-- Three indexes that cost every message a write: one that nothing needs, and two that held
-- more than their readers look at (issue 48: a message's cost is mostly the pages its
-- commits write, a WAL frame each on SQLite).
-- Keep in step with migrations/sqlite/0019_write_less.sql.

-- `rooms_by_activity` moved with every message (a room's `last_active_ms` changes, so its
-- entry is deleted and inserted again). Its one reader, the room listing
-- (`Store::rooms`), reads every room of the agent and counts each room's messages anyway;
-- sorting those rows costs nothing beside that.
DROP INDEX IF EXISTS rooms_by_activity;

-- `outbox_due` held every reply ever sent, under (state, not_before_ms): the delivered
-- mark moved an entry from the pending part to the delivered part, two leaves, and the
-- index grew with the outbox. Only the claims read it, and only for pending rows. Now it
-- holds pending rows alone, in id order, with the time the claim checks: a claim walks it
-- from the oldest without a sort and stops at its limit, and the delivered mark only
-- takes an entry out. A query uses it by repeating `state = 'pending'` word for word
-- (SQLite's rule for partial indexes), as the claims in gateway/src/storage/outbox.rs do.
DROP INDEX IF EXISTS outbox_due;
CREATE INDEX outbox_due ON outbox (id, not_before_ms) WHERE state = 'pending';

-- `messages_by_author` held every message under its author, the persona's replies too, a
-- second leaf for each exchange. Its one reader, fact extraction (storage/memory_sql.rs,
-- `USER_MESSAGES_AFTER` and its count), reads people's messages only, `from_agent = FALSE`,
-- written out in the query as here.
DROP INDEX IF EXISTS messages_by_author;
CREATE INDEX messages_by_author ON messages (agent_id, author_id, id) WHERE from_agent = FALSE;
