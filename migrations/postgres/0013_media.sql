-- Images posted to the HTTP API (issue 32, docs/media.md), by the SHA-256 of their bytes.
-- The journal and the bus carry only the reference (`media:sha256:<hex>` in the message's
-- attachment), so a large image never rides in a journal row or a bus message (NATS refuses
-- a payload over 1 MiB by default). The same bytes posted twice are one row.
-- Keep in step with migrations/sqlite/0014_media.sql.
CREATE TABLE media (
    sha256        TEXT    NOT NULL PRIMARY KEY,
    mime          TEXT    NOT NULL,
    size          BIGINT NOT NULL,
    bytes         BYTEA    NOT NULL,
    created_at_ms BIGINT NOT NULL
);
