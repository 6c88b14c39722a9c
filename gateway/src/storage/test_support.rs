//! What the storage tests share: a fresh database per test body on either backend, and
//! [`on_both_backends!`], which turns each body into a SQLite test and a Postgres test.
//! Tests elsewhere in the crate that need a real store on both backends (the restart drive
//! in `ingress`) use them too, with [`journal_copies`] to fill a journal fast.
//!
//! The Postgres server is `TROUPE_TEST_DATABASE_URL` (through `troupe_e2e::env`, the same
//! rule as the end-to-end tests): without it the Postgres variants are skipped with a note,
//! and under `CI=true` they fail rather than pass silently.

use futures::FutureExt;
use sqlx::Connection;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use super::{JournalId, Store, with_pool};

/// What a test body gets: a migrated store, and the URL it came from (to open another).
pub(crate) struct Ctx {
    pub(crate) store: Store,
    pub(crate) url: String,
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
}

/// Runs `body` against a fresh database of `kind`, and removes the database afterwards,
/// whether the body passed or panicked.
pub(crate) async fn run<F, Fut>(kind: Kind, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    match kind {
        Kind::Sqlite => {
            let (dir, store) = sqlite_store().await;
            body(Ctx {
                store,
                url: sqlite_url(&dir),
            })
            .await;
        }
        Kind::Postgres => {
            // libtest names the thread after the test: the note says which was skipped.
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("a Postgres storage test");
            let Some(admin_url) = troupe_e2e::env::postgres_url(test) else {
                return;
            };
            let name = format!("troupe_test_{}", uuid::Uuid::new_v4().simple());
            let mut admin = sqlx::PgConnection::connect(&admin_url)
                .await
                .expect("connect to TROUPE_TEST_DATABASE_URL");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .expect("create the test database");
            let url = with_database(&admin_url, &name);
            let store = Store::connect(&url).await.expect("connect to Postgres");
            let closer = store.clone();
            let outcome = AssertUnwindSafe(body(Ctx { store, url }))
                .catch_unwind()
                .await;
            closer.close().await;
            // FORCE ends connections a failed body may have left open.
            let dropped = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
            if let Err(e) = dropped {
                eprintln!("could not drop test database {name}: {e}");
            }
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// A migrated store on a fresh SQLite file, for tests that need one store and no Postgres
/// run; keep the directory as long as the store (dropping it removes the file).
/// In-memory SQLite is refused (see `storage`): this is the path production takes.
pub(crate) async fn sqlite_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::connect(&sqlite_url(&dir))
        .await
        .expect("connect to SQLite");
    (dir, store)
}

/// One line of SQLite's `EXPLAIN QUERY PLAN`: its id, its parent's, a spare, the step.
type PlanStep = (i64, i64, i64, String);

/// The steps SQLite would take to run `sql` on a fresh migrated database (`EXPLAIN QUERY
/// PLAN`), its parameters bound by `bind`: what a test that a statement reads the index
/// written for it looks at.
pub(crate) async fn sqlite_plan(
    sql: &str,
    bind: impl for<'q> FnOnce(
        sqlx::query::QueryAs<'q, sqlx::Sqlite, PlanStep, sqlx::sqlite::SqliteArguments>,
    ) -> sqlx::query::QueryAs<
        'q,
        sqlx::Sqlite,
        PlanStep,
        sqlx::sqlite::SqliteArguments,
    >,
) -> Vec<String> {
    let (_dir, store) = sqlite_store().await;
    let super::Pool::Sqlite(pool) = &store.pool else {
        unreachable!("a SQLite store")
    };
    let explain = sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
    bind(explain)
        .fetch_all(pool)
        .await
        .expect("EXPLAIN QUERY PLAN")
        .into_iter()
        .map(|(.., step)| step)
        .collect()
}

/// The URL of the database file in `dir`.
fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("troupe.db").display())
}

/// [`run`] for a body that needs only the store.
pub(crate) async fn run_with_store<F, Fut>(kind: Kind, body: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    run(kind, |ctx| body(ctx.store)).await
}

/// `url` with its database name replaced by `name`, keeping any query string.
pub(super) fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{server}/{name}{query}")
}

/// One `#[tokio::test]` per backend for each body: `storage::<file>::<body>::{sqlite,postgres}`.
/// The calling module has `run(Kind, body)` in scope (this module's [`run`] for bodies that
/// take a [`Ctx`], [`run_with_store`] imported as `run` for bodies that take a [`Store`]),
/// and `Kind`.
macro_rules! on_both_backends {
    ($($body:ident),* $(,)?) => {
        $(
            mod $body {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::run(super::Kind::Sqlite, super::$body).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::run(super::Kind::Postgres, super::$body).await
                }
            }
        )*
    };
}
pub(crate) use on_both_backends;

/// Adds `copies` journal entries that are copies of entry `of` (its state, attempts and
/// message, under new message ids), in one statement: a journal of a hundred thousand
/// entries in a second, on either backend.
pub(crate) async fn journal_copies(store: &Store, of: JournalId, copies: i64) {
    with_pool!(store, pool => {
        sqlx::query(
            "WITH RECURSIVE n(i) AS (
                 SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < $2)
             INSERT INTO journal (agent_id, platform, room, caller, platform_message_id, inbound,
                 state, attempts, last_error, created_at_ms, updated_at_ms)
             SELECT agent_id, platform, room, caller, platform_message_id || '-' || i, inbound,
                 state, attempts, last_error, created_at_ms, updated_at_ms
             FROM journal, n WHERE journal.id = $1",
        )
        .bind(of.0)
        .bind(copies)
        .execute(pool)
        .await
        .expect("copy journal entries");
    });
}
