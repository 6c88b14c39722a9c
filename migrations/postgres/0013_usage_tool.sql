-- Tools (issue 33, docs/tools.md): a model call of a turn with tools that asked for tool
-- calls is recorded with purpose 'tool'. Keep in step with migrations/sqlite/0013_usage_tool.sql.
ALTER TABLE usage_records DROP CONSTRAINT IF EXISTS usage_records_purpose_check;
ALTER TABLE usage_records ADD CONSTRAINT usage_records_purpose_check
    CHECK (purpose IN ('reply', 'summary', 'facts', 'embedding', 'tool'));
