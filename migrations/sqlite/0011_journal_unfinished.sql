-- The restart drive (gateway/src/ingress.rs, `Ingress::replay`) reads the journal entries a
-- previous run left unfinished, oldest first, a page at a time, and skips in SQL the failed
-- ones that have had all their attempts (issue 30, finding 10: 100,000 given-up entries
-- used to fill the one read it made, and no pending entry after them was ever driven).
-- This partial index holds only pending and failed entries (done ones, nearly all of the
-- journal, stay out), in id order, with the state and attempts the filter reads: a page
-- walks the index from where the last one ended, in order, without a sort, and skips
-- given-up entries without reading their rows. A query uses it by repeating its predicate,
-- `state IN ('pending', 'failed')`, word for word (SQLite's rule for partial indexes).
-- It replaces `journal_by_state`, which only that read used: with both, SQLite's planner
-- without statistics took the old one and sorted every unfinished entry for each page.
-- Keep in step with migrations/postgres/0011_journal_unfinished.sql.
DROP INDEX IF EXISTS journal_by_state;
CREATE INDEX journal_unfinished ON journal (id, state, attempts)
    WHERE state IN ('pending', 'failed');
