//! The two statements every SQLite transaction here ends with, shared by the engine's
//! writer (`storage::engine`) and its read connections (`storage::readers`). They live
//! below both so that neither module imports the other's internals.

use rusqlite::Connection;

/// Runs one statement without parameters, through the connection's statement cache.
pub(super) fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Commits the open transaction, or rolls it back and says why it could not commit.
pub(super) fn commit(conn: &Connection) -> Option<String> {
    exec(conn, "COMMIT")
        .map_err(|e| {
            let _ = exec(conn, "ROLLBACK");
            e.to_string()
        })
        .err()
}
