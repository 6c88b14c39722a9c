//! The SQLite WAL's upkeep beside the engine: who copies the WAL into the database file, and
//! when the WAL starts over from its beginning.
//!
//! The engine's connection never checkpoints on its own (`wal_autocheckpoint = 0`): a
//! checkpoint's two fsyncs would stall every batch queued behind it. `checkpoints` runs them
//! on the sqlx pool's connection instead, every `CHECKPOINT_EVERY`, passively (never waiting
//! for the engine's writes). A passive checkpoint never catches up with a WAL that is being
//! written, and SQLite writes a WAL from its start again only when a transaction begins with
//! every frame copied: under steady writes the file grew without end (a disk filled by a
//! burst; on one kernel the zeroing of its new pages was a fifth of a quiet room's CPU,
//! docs/benchmarks.md). So the engine restarts it once every `WAL_RESTART_FRAMES` frames
//! (`Restart`), in two steps:
//! 1. it asks `checkpoints` for a pass at once (`Checkpoints::ask`), which copies nearly every
//!    frame and pays the fsyncs of the WAL and of the database file off the engine's thread;
//! 2. once that pass has finished, the engine checkpoints what was written since (a few
//!    batches' frames: two fsyncs with little to flush) between two batches, and its next
//!    transaction writes the WAL from its start.
//!
//! Until 2026-12-07 the engine ran the whole checkpoint itself, between batches: its fsyncs
//! flushed up to half a second of writes (6 ms at the median, up to 55 ms on this host), and
//! every call queued meanwhile waited; under 16 HTTP clients those waits were the p99. If the
//! pass is slow, the engine still restarts the WAL itself once it has grown by twice
//! `WAL_RESTART_FRAMES`, as before: the file's bound does not depend on the other thread.

use rusqlite::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

use super::SQLITE_BUSY_TIMEOUT;

/// WAL frames (pages) written since the last restart before the engine asks for one.
pub(super) const WAL_RESTART_FRAMES: i32 = 4_000;
/// What a restarted WAL keeps on disk (`journal_size_limit`): what it reaches between
/// restarts at most, so that the file is reused rather than cut and grown again.
pub(super) const WAL_KEEP_BYTES: i64 = 2 * WAL_RESTART_FRAMES as i64 * 4_120;
/// How often `checkpoints` runs a pass unasked.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// What the engine and the checkpointing task share: a pass asked for, and the passes
/// started and finished, counted (a pass asked for is one that starts after the ask).
#[derive(Default)]
pub(super) struct Checkpoints {
    asked: Notify,
    started: AtomicU64,
    finished: AtomicU64,
}

impl Checkpoints {
    /// Asks for a pass now; returns what `finished_since` takes to tell when it is done.
    fn ask(&self) -> u64 {
        let at = self.started.load(Ordering::Acquire);
        self.asked.notify_one();
        at
    }

    /// Whether a pass that started after `ask` returned `at` has finished.
    fn finished_since(&self, at: u64) -> bool {
        self.finished.load(Ordering::Acquire) > at
    }
}

/// Checkpoints the WAL from the sqlx pool's connection every `CHECKPOINT_EVERY`, and at
/// once when the engine asks, passively (never waiting for the engine's writes), until the
/// pool is closed. A pass that fails counts as finished: the engine then copies the rest
/// itself, as it would after any pass.
pub(super) async fn checkpoints(pool: sqlx::SqlitePool, shared: Arc<Checkpoints>) {
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.asked.notified() => {}
        }
        if pool.is_closed() {
            return;
        }
        let pass = shared.started.fetch_add(1, Ordering::AcqRel) + 1;
        let done = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await;
        shared.finished.store(pass, Ordering::Release);
        if let Err(e) = done {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, "could not checkpoint the SQLite WAL");
        }
    }
}

/// The engine's side of a WAL restart: the frames its commits left, and where the restart
/// it is working towards stands. Kept with the engine's connection, behind its lock.
pub(super) struct Restart {
    checkpoints: Arc<Checkpoints>,
    /// The frames in the WAL after the last commit that wrote any.
    frames: i32,
    /// The frames counted at the last restart the engine made (0 after the WAL restarted).
    tried_at: i32,
    /// The pass asked for (`Checkpoints::ask`), while the engine waits for it.
    asked: Option<u64>,
    /// A lone call woke the engine's thread for step 2 (one empty call at a time: the
    /// thread clears this after its next batch).
    pub(super) woken: bool,
}

impl Restart {
    pub(super) fn new(checkpoints: Arc<Checkpoints>) -> Restart {
        Restart {
            checkpoints,
            frames: 0,
            tried_at: 0,
            asked: None,
            woken: false,
        }
    }

    /// Takes the frame count a commit left in the WAL (`-1` when it wrote none).
    pub(super) fn note_commit(&mut self, frames: i32) {
        if frames < 0 {
            return;
        }
        if frames < self.frames {
            // The WAL started over (this engine's restart, or a quiet moment's).
            self.tried_at = 0;
            self.asked = None;
        }
        self.frames = frames;
    }

    /// Whether step 2 is due now: the WAL has grown by `WAL_RESTART_FRAMES` and the pass
    /// asked for has finished, or it has grown by twice that. Asks for the pass (step 1) the
    /// first time the WAL is found grown.
    pub(super) fn due(&mut self) -> bool {
        let due = self.tried_at + WAL_RESTART_FRAMES;
        if self.frames < due {
            return false;
        }
        let Some(at) = self.asked else {
            self.asked = Some(self.checkpoints.ask());
            return false;
        };
        self.checkpoints.finished_since(at) || self.overdue()
    }

    /// Whether the WAL has grown by twice `WAL_RESTART_FRAMES` since the last restart: the
    /// engine then checkpoints whether or not the pass it asked for has run.
    fn overdue(&self) -> bool {
        self.frames >= self.tried_at + 2 * WAL_RESTART_FRAMES
    }

    /// Step 2, on the engine's thread between batches: copies what the pass left, so that
    /// the next transaction writes the WAL from its start. A reader holding an old snapshot
    /// can keep a frame uncopied: then the next try waits for as many frames again.
    ///
    /// A pass under way on the other connection holds SQLite's checkpoint lock, which a
    /// passive checkpoint does not wait for. Then the engine tries again after its next
    /// batch; but once the WAL has grown by twice `WAL_RESTART_FRAMES` (writes outrun the
    /// passes) it waits here for the lock, as its busy handler would: this is what bounds
    /// the file.
    pub(super) fn between_batches(&mut self, conn: &Connection) {
        self.woken = false;
        if !self.due() {
            return;
        }
        let overdue = self.overdue();
        let mut waited = Duration::ZERO;
        loop {
            match checkpoint(conn) {
                Ok(true) if overdue && waited < SQLITE_BUSY_TIMEOUT => {
                    std::thread::sleep(LOCKED_OUT_RETRY);
                    waited += LOCKED_OUT_RETRY;
                }
                Ok(true) => return,
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "could not checkpoint the SQLite WAL");
                    break;
                }
            }
        }
        self.tried_at = self.frames;
        self.asked = None;
    }
}

/// How long an overdue restart sleeps before it asks for the checkpoint lock again.
const LOCKED_OUT_RETRY: Duration = Duration::from_micros(500);

/// A passive checkpoint on `conn`; whether another connection's checkpoint held the lock.
fn checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        row.get::<_, i64>(0).map(|busy| busy != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart() -> (Arc<Checkpoints>, Restart) {
        let shared = Arc::new(Checkpoints::default());
        (shared.clone(), Restart::new(shared))
    }

    /// Finishes the pass that is asked for (what `checkpoints` does on its ask).
    fn run_pass(shared: &Checkpoints) {
        let pass = shared.started.fetch_add(1, Ordering::AcqRel) + 1;
        shared.finished.store(pass, Ordering::Release);
    }

    #[test]
    fn the_engine_checkpoints_only_after_the_pass_it_asked_for() {
        let (shared, mut restart) = restart();
        restart.note_commit(WAL_RESTART_FRAMES - 1);
        assert!(!restart.due(), "not grown enough yet");
        // A pass that was under way before the ask does not count.
        shared.started.fetch_add(1, Ordering::AcqRel);
        restart.note_commit(WAL_RESTART_FRAMES);
        assert!(!restart.due(), "the first look asks for a pass");
        shared.finished.store(1, Ordering::Release);
        restart.note_commit(WAL_RESTART_FRAMES + 10);
        assert!(
            !restart.due(),
            "the pass under way at the ask finished, not the asked one"
        );
        run_pass(&shared);
        assert!(restart.due(), "the asked pass finished");
    }

    #[test]
    fn a_slow_pass_does_not_let_the_wal_grow_past_twice_the_frames() {
        let (_shared, mut restart) = restart();
        restart.note_commit(WAL_RESTART_FRAMES);
        assert!(!restart.due());
        restart.note_commit(2 * WAL_RESTART_FRAMES - 1);
        assert!(!restart.due());
        restart.note_commit(2 * WAL_RESTART_FRAMES);
        assert!(restart.due(), "no pass finished, and the WAL doubled");
    }

    #[test]
    fn a_wal_that_started_over_forgets_the_ask() {
        let (shared, mut restart) = restart();
        restart.note_commit(WAL_RESTART_FRAMES);
        assert!(!restart.due());
        run_pass(&shared);
        // The WAL restarted on its own (a quiet moment): the old pass is not this round's.
        restart.note_commit(3);
        restart.note_commit(WAL_RESTART_FRAMES);
        assert!(!restart.due(), "a new round asks again");
        run_pass(&shared);
        assert!(restart.due());
    }
}
