//! The SQLite engine's tests (engine.rs): batches, savepoints, the WAL's bounds, and the
//! calls that run on the caller's thread.

use super::*;
use crate::storage::wal_upkeep::WAL_RESTART_FRAMES;

/// A store on a fresh file, and its engine.
async fn engine() -> (tempfile::TempDir, super::super::Store, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = super::super::Store::connect(&url).await.unwrap();
    let engine = store
        .engine()
        .cloned()
        .expect("a file database has an engine");
    (dir, store, engine)
}

fn insert(conn: &Connection, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO agents (id, name, created_at_ms, updated_at_ms) VALUES (?1, ?1, 0, 0)",
        [value],
    )?;
    Ok(())
}

fn count(conn: &Connection, value: &str) -> Result<i64> {
    Ok(
        conn.query_row("SELECT COUNT(*) FROM agents WHERE id = ?1", [value], |r| {
            r.get(0)
        })?,
    )
}

/// A call that holds the engine's thread (queued there, whatever `engine` allows) until
/// `release` is sent; it is running when this returns.
async fn hold_the_thread(
    engine: &Engine,
) -> (
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<Result<()>>,
) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let engine = engine.clone().queued();
        async move {
            engine
                .call(move |_| {
                    let _ = started.send(());
                    let _ = held.recv();
                    Ok(())
                })
                .await
        }
    });
    running.await.unwrap();
    (release, first)
}

/// Calls queued together share one transaction, and one that fails rolls back alone:
/// the others' writes are committed, its own are not.
#[tokio::test]
async fn a_failing_call_in_a_batch_rolls_back_alone() {
    let (_dir, _store, engine) = engine().await;
    let engine = engine.queued();
    // The first call holds the thread until the next two are queued behind it. It is
    // running before they are sent: sent earlier, they could join its batch (the thread
    // takes whatever is queued when it wakes), and the queue would never hold them.
    let (release, first) = hold_the_thread(&engine).await;
    let good = tokio::spawn({
        let engine = engine.clone();
        async move { engine.call(|conn| insert(conn, "kept")).await }
    });
    let bad = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .call(|conn| {
                    insert(conn, "rolled back")?;
                    Err::<(), _>(StorageError::Corrupt("this call fails".into()))
                })
                .await
        }
    });
    while engine.queue.capacity() > QUEUE - 2 {
        tokio::task::yield_now().await;
    }
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    good.await.unwrap().unwrap();
    assert!(matches!(bad.await.unwrap(), Err(StorageError::Corrupt(_))));
    let (kept, gone) = engine
        .call(|conn| Ok((count(conn, "kept")?, count(conn, "rolled back")?)))
        .await
        .unwrap();
    assert_eq!((kept, gone), (1, 0));
}

/// Steady writes, one after the other (a quiet room), never let the WAL grow without end:
/// the engine restarts it every `WAL_RESTART_FRAMES` frames, once the checkpoint it asks
/// for has run (at twice that if it has not), and it stays under three rounds of growth (a
/// reader's snapshot may keep a try from restarting it). Without the restart this test
/// writes a WAL of about 100 MB. On a multi-threaded runtime, as `troupe run` has: the
/// pass the engine asks for runs on another worker while the engine writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_writes_keep_the_wal_bounded() {
    let (dir, _store, engine) = engine().await;
    engine
        .call(|conn| Ok(conn.execute_batch("CREATE TABLE scratch (body BLOB)")?))
        .await
        .unwrap();
    // About 5 frames a call (a 16 KiB row over 4 KiB pages): five restarts' worth.
    for _ in 0..WAL_RESTART_FRAMES {
        engine
            .call(|conn| {
                conn.execute("INSERT INTO scratch (body) VALUES (zeroblob(16384))", [])?;
                Ok(())
            })
            .await
            .unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("t.db-wal"))
        .unwrap()
        .len();
    let most = 3 * WAL_RESTART_FRAMES as u64 * 4_120;
    assert!(wal <= most, "the WAL grew to {wal} bytes");
}

/// The room's recent messages, asked with one window and then another, are planned
/// once: a new `LIMIT` does not send the statement back to the compiler (QPSG).
#[tokio::test]
async fn a_new_limit_does_not_prepare_the_statement_again() {
    let (_dir, _store, engine) = engine().await;
    let reprepared = engine
        .call(|conn| {
            let agent = AgentId::new("ada");
            let room = RoomKey::new(
                troupe_connectors::Platform::Discord,
                troupe_connectors::RoomId::new("r1"),
            );
            for limit in [8, 32, 8, 16] {
                recent_messages(conn, &agent, &room, limit)?;
            }
            let stmt = conn.prepare_cached(RECENT_MESSAGES)?;
            Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
        })
        .await
        .unwrap();
    assert_eq!(reprepared, 0);
}

/// A closed store's engine refuses calls as a closed pool (a shutdown, for callers).
#[tokio::test]
async fn a_closed_store_refuses_calls() {
    let (_dir, store, engine) = engine().await;
    store.close().await;
    let refused = engine.call(|_| Ok(())).await;
    assert!(matches!(
        refused,
        Err(StorageError::Database(sqlx::Error::PoolClosed))
    ));
}

/// The name of the thread a call ran on.
fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

/// A lone call runs on its caller's thread (no hand-off), and its write is committed when
/// it returns: the thread's connection reads it.
#[tokio::test]
async fn a_lone_call_runs_on_its_callers_thread() {
    let (_dir, _store, engine) = engine().await;
    let ran_on = engine
        .call(|conn| {
            insert(conn, "here")?;
            Ok(thread_name())
        })
        .await
        .unwrap();
    assert_ne!(ran_on, "troupe-sqlite");
    let counted = engine
        .clone()
        .queued()
        .call(|conn| Ok((count(conn, "here")?, thread_name())))
        .await
        .unwrap();
    assert_eq!(counted, (1, "troupe-sqlite".to_string()));
}

/// A call that meets one running on the thread queues behind it, rather than waiting for
/// the connection on its caller's thread.
#[tokio::test]
async fn a_call_meeting_a_batch_queues_for_the_thread() {
    let (_dir, _store, engine) = engine().await;
    let (release, first) = hold_the_thread(&engine).await;
    let second = tokio::spawn({
        let engine = engine.clone();
        async move { engine.call(|_| Ok(thread_name())).await }
    });
    while engine.queue.capacity() == QUEUE {
        tokio::task::yield_now().await;
    }
    release.send(()).unwrap();
    first.await.unwrap().unwrap();
    assert_eq!(second.await.unwrap().unwrap(), "troupe-sqlite");
}

/// A lone call that finds the other connection (the sqlx pool's) holding the write lock
/// does not wait on its caller's thread: it queues, and the thread's busy handler waits
/// until the lock is let go; the write is then committed.
#[tokio::test]
async fn a_lone_call_finding_the_database_locked_queues() {
    let (_dir, store, engine) = engine().await;
    let super::super::Pool::Sqlite(pool) = &store.pool else {
        unreachable!("a file store")
    };
    let mut holder = pool.acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    // `join!` polls in order: the call has tried the lock, and queued, before it is let go.
    let (ran_on, _) = tokio::join!(
        engine.call(|conn| {
            insert(conn, "later")?;
            Ok(thread_name())
        }),
        async { sqlx::query("COMMIT").execute(&mut *holder).await.unwrap() }
    );
    assert_eq!(ran_on.unwrap(), "troupe-sqlite");
    let kept = engine.call(|conn| count(conn, "later")).await.unwrap();
    assert_eq!(kept, 1);
}

/// With more than one other call pending (concurrency: several rooms' turns at once), a call
/// queues for the thread even when the connection is free, so that concurrent calls batch.
#[tokio::test]
async fn a_call_among_several_pending_queues_for_the_thread() {
    let (_dir, _store, engine) = engine().await;
    let alone = engine.call(|_| Ok(thread_name())).await.unwrap();
    assert_ne!(alone, "troupe-sqlite");
    // Two calls made elsewhere and not answered yet, as other rooms' turns would have.
    engine.pending.fetch_add(2, Ordering::Relaxed);
    let crowded = engine.call(|_| Ok(thread_name())).await.unwrap();
    engine.pending.fetch_sub(2, Ordering::Relaxed);
    assert_eq!(crowded, "troupe-sqlite");
}
