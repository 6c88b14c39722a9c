-- Where a connector keeps its position across restarts (a notification cursor, a
-- getUpdates offset, the last message seen per channel). The journal still decides
-- duplicates; this only saves re-reading.
CREATE TABLE connector_state (
    agent_id      TEXT   NOT NULL,
    platform      TEXT   NOT NULL,
    key           TEXT   NOT NULL,
    value         TEXT   NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, platform, key)
);
