//! `troupe-wal`: SQLite's own `unix` VFS, with the WAL's writes of one commit joined into one
//! `pwrite` (issue 48). The engine's connection (storage/engine.rs) opens the database
//! through it; every other connection is plain `unix`, and so is every file but the WAL and
//! the database file (whose lock release is the one call it adds to).
//!
//! Why: SQLite writes a WAL frame as two writes, its 24-byte header and then its page
//! (`walWriteOneFrame`), so a commit of 12 pages is 24 `pwrite`s, and each one straddles
//! pages of the kernel's cache. In a quiet room those writes were a sixth of a message's
//! CPU, and at 1,000 rooms a third of the engine thread's, and SQLite has no setting that
//! joins them (docs/benchmarks.md, "Where the serial thread's time goes").
//!
//! What is held back, and until when. A frame's header is kept until its page comes (the
//! very next write, in `walWriteOneFrame`), and whole frames are kept while the next frame
//! follows on. Everything kept is written, in one `pwrite`, as soon as:
//! - the frame just completed is a commit frame (its header's "database size" field is not
//!   zero: SQLite's commit mark). Its write is still inside `sqlite3WalFrames`, before the
//!   wal-index header that makes the commit visible to anyone is written, and its error, if
//!   any, is that frame's error: the transaction fails as it would have, nothing is
//!   published. So a commit is on its way to the disk exactly when it was before;
//! - anything else is asked of the WAL file (a read, a sync, its size, a truncation, a file
//!   control, its close), or a write does not follow on, or 124 KiB are kept.
//!
//! Frames kept between those points belong to a transaction still open (a large one spills
//! pages before its commit): no reader or checkpoint reads a frame that no commit covers,
//! and a crash loses them as it would lose them unwritten. A header rewritten after a read
//! (`walRewriteChecksums`, when a transaction wrote a page twice) is written at once.
//!
//! And when a write transaction ends without a commit (rolled back after it spilled pages),
//! what it kept is written as its WAL write lock is released (the database file's
//! `xShmLock`), while no other connection can write the WAL: as those frames would have been
//! written unjoined, they never land on frames another connection writes later.
//!
//! The rest of the VFS (locking, shared memory, the database file's reads and writes, the
//! journal) is the `unix` VFS's own functions, unchanged, so a connection through
//! `troupe-wal` and one through `unix` share the database as any two connections do.

use rusqlite::ffi;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub(super) const NAME: &str = "troupe-wal";
const NAME_C: &std::ffi::CStr = c"troupe-wal";

/// A WAL frame's header (SQLite's `WAL_FRAME_HDRSIZE`).
const FRAME_HEADER: usize = 24;
/// Kept at most before a write, whatever comes: under the most the `unix` VFS writes in
/// one call (`seekAndWriteFd` keeps 17 bits of a length: 128 KiB less a byte). A large
/// commit (a busy engine's batch) is one write each 30 frames or so.
const MAX_KEPT: usize = 124 * 1024;
/// The most `flush` hands the `unix` file at once (one frame may overshoot `MAX_KEPT`).
const MAX_WRITE: usize = (1 << 17) - 1;

/// The `unix` VFS, found when `troupe-wal` is registered.
static UNIX: OnceLock<std::result::Result<Unix, String>> = OnceLock::new();

/// The `unix` VFS (`sqlite3_vfs_find` returns a pointer that lives as long as the process).
struct Unix(*mut ffi::sqlite3_vfs);
// SAFETY: a registered VFS is immutable and SQLite's own functions on it are thread-safe.
unsafe impl Send for Unix {}
unsafe impl Sync for Unix {}

/// Registers `troupe-wal` once per process (not as the default VFS).
pub(super) fn register() -> std::result::Result<(), String> {
    UNIX.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find` and `sqlite3_vfs_register` are thread-safe; the VFS
        // registered is a copy of `unix` that is leaked, so it lives as long as SQLite may
        // use it, and only its name, file size and `xOpen` differ.
        unsafe {
            let unix = ffi::sqlite3_vfs_find(c"unix".as_ptr());
            if unix.is_null() {
                return Err("SQLite has no unix VFS".into());
            }
            let mut vfs = *unix;
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = NAME_C.as_ptr();
            vfs.szOsFile = c_int::try_from(inner_offset())
                .map_err(|e| e.to_string())?
                .saturating_add((*unix).szOsFile);
            vfs.xOpen = Some(open);
            let rc = ffi::sqlite3_vfs_register(Box::leak(Box::new(vfs)), 0);
            if rc != ffi::SQLITE_OK {
                return Err(format!("cannot register the {NAME} VFS (SQLite code {rc})"));
            }
            Ok(Unix(unix))
        }
    })
    .as_ref()
    .map(|_| ())
    .map_err(Clone::clone)
}

/// A database or WAL file: our state, then the `unix` VFS's file (`inner`, at
/// `inner_offset()` in the same allocation, which SQLite sizes by our `szOsFile`).
#[repr(C)]
struct WalFile {
    /// First, as SQLite's `sqlite3_file` "subclasses" require.
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// A WAL (writes joined), or a database file (writes the `unix` file's own).
    is_wal: bool,
    /// A database file's WAL, or a WAL's database file, while both are open (one pager
    /// opens both, and only its connection calls either).
    partner: *mut WalFile,
    /// Bytes written to us and not yet to the file, from `kept_at` on.
    kept: Vec<u8>,
    kept_at: i64,
    /// A frame header is the last thing kept: whether it marks a commit.
    header_of_commit: Option<bool>,
    /// The last call was a read (a header written next is a rewrite: written at once).
    after_read: bool,
}

fn inner_offset() -> usize {
    std::mem::size_of::<WalFile>().next_multiple_of(16)
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Ok(Unix(unix))) = UNIX.get() else {
        return ffi::SQLITE_CANTOPEN;
    };
    let unix = *unix;
    // SAFETY: `unix` is the live `unix` VFS; `file` is SQLite's allocation of our
    // `szOsFile` bytes, so the `unix` file fits at its start, or after a `WalFile`.
    unsafe {
        let Some(unix_open) = (*unix).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let (wal, main) = (
            flags & ffi::SQLITE_OPEN_WAL != 0,
            flags & ffi::SQLITE_OPEN_MAIN_DB != 0,
        );
        if !wal && !main {
            return unix_open(unix, name, file, flags, out_flags);
        }
        let inner = file
            .cast::<u8>()
            .add(inner_offset())
            .cast::<ffi::sqlite3_file>();
        let rc = unix_open(unix, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            // No methods: SQLite does not close a file whose open failed.
            (*file).pMethods = std::ptr::null();
            return rc;
        }
        let this = file.cast::<WalFile>();
        this.write(WalFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            inner,
            is_wal: wal,
            partner: std::ptr::null_mut(),
            kept: Vec::new(),
            kept_at: 0,
            header_of_commit: None,
            after_read: false,
        });
        // The pager passes its database's name to both opens, the WAL's as a name that
        // `sqlite3_filename_database` leads back to the very same pointer.
        let mut open = databases();
        if main {
            open.push((name as usize, this as usize));
        } else if let Some(&(_, db)) = open
            .iter()
            .find(|(n, _)| *n == ffi::sqlite3_filename_database(name) as usize)
        {
            let db = db as *mut WalFile;
            (*db).partner = this;
            (*this).partner = db;
        }
        ffi::SQLITE_OK
    }
}

/// The database files open through this VFS: (the name's pointer, the file).
fn databases() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    static OPEN: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Unlinks `file` from its partner, and a database file from the open ones.
fn unlink(file: &mut WalFile) {
    if !file.partner.is_null() {
        // SAFETY: a partner is open until it unlinks itself here.
        unsafe { (*file.partner).partner = std::ptr::null_mut() };
        file.partner = std::ptr::null_mut();
    }
    let this = std::ptr::from_mut(file) as usize;
    databases().retain(|&(_, f)| f != this);
}

/// The `WalFile` behind a file SQLite passes to our methods (a WAL or a database file).
///
/// # Safety
/// `file` must be a file `open` initialised as a `WalFile` and not yet closed.
unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    // SAFETY: per the contract above; SQLite calls a file's methods one at a time.
    unsafe { &mut *file.cast::<WalFile>() }
}

/// The `unix` file's method `$m`, called with `$args`; `SQLITE_IOERR` if it has none.
macro_rules! unix {
    ($w:expr, $m:ident $(, $arg:expr)*) => {{
        let inner = $w.inner;
        // SAFETY: `inner` is the open `unix` file, whose methods SQLite set at its open.
        match unsafe { (*(*inner).pMethods).$m } {
            Some(f) => unsafe { f(inner $(, $arg)*) },
            None => ffi::SQLITE_IOERR,
        }
    }};
}

/// Writes what is kept, in one write, and forgets it whatever the outcome (after a failed
/// write SQLite writes the frames again, or gives the transaction up).
fn flush(w: &mut WalFile) -> c_int {
    w.header_of_commit = None;
    if w.kept.is_empty() {
        return ffi::SQLITE_OK;
    }
    let mut rc = ffi::SQLITE_OK;
    let mut at = w.kept_at;
    for chunk in w.kept.chunks(MAX_WRITE) {
        let (data, len) = (chunk.as_ptr().cast::<c_void>(), chunk.len() as c_int);
        #[cfg(test)]
        tests::WRITES.with(|n| n.set(n.get() + 1));
        rc = unix!(w, xWrite, data, len, at);
        if rc != ffi::SQLITE_OK {
            break;
        }
        at += chunk.len() as i64;
    }
    w.kept.clear();
    rc
}

/// Flushes before any call but a write, and notes whether it was a read.
fn before(w: &mut WalFile, read: bool) -> c_int {
    w.after_read = read;
    flush(w)
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite passes our open file and `amount` readable bytes at `data`.
    let (w, bytes) = unsafe {
        (
            wal(file),
            std::slice::from_raw_parts(data.cast::<u8>(), usize::try_from(amount).unwrap_or(0)),
        )
    };
    if !w.is_wal {
        return unix!(w, xWrite, data, amount, offset);
    }
    let after_read = std::mem::take(&mut w.after_read);
    let follows_on = !w.kept.is_empty() && offset == w.kept_at + w.kept.len() as i64;
    // (`take` first: a header kept is this write's to complete or to flush.)
    if let Some(commit) = w.header_of_commit.take()
        && follows_on
    {
        // The page of the header kept: the frame is whole.
        w.kept.extend_from_slice(bytes);
        if commit || w.kept.len() >= MAX_KEPT {
            return flush(w);
        }
        return ffi::SQLITE_OK;
    }
    if bytes.len() == FRAME_HEADER && !after_read {
        // A new frame's header: kept, after what is kept if it follows on.
        if !follows_on {
            let rc = flush(w);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            w.kept_at = offset;
        }
        w.kept.extend_from_slice(bytes);
        w.header_of_commit = Some(bytes[4..8] != [0, 0, 0, 0]);
        return ffi::SQLITE_OK;
    }
    let rc = flush(w);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    #[cfg(test)]
    tests::WRITES.with(|n| n.set(n.get() + 1));
    unix!(w, xWrite, data, amount, offset)
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: our open file; after the `unix` close it is dropped in place and never
    // used again (SQLite frees the allocation).
    let w = unsafe { wal(file) };
    let flushed = flush(w);
    unlink(w);
    let closed = unix!(w, xClose);
    unsafe { std::ptr::drop_in_place(std::ptr::addr_of_mut!(w.kept)) };
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: our open file.
    let w = unsafe { wal(file) };
    match before(w, true) {
        ffi::SQLITE_OK => unix!(w, xRead, data, amount, offset),
        rc => rc,
    }
}

/// A method that flushes first, then is the `unix` file's (a database file keeps nothing:
/// only the `unix` call).
macro_rules! flushing {
    ($name:ident, $m:ident $(, $arg:ident : $ty:ty)*) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: our open file.
            let w = unsafe { wal(file) };
            match before(w, false) {
                ffi::SQLITE_OK => unix!(w, $m $(, $arg)*),
                rc => rc,
            }
        }
    };
}

/// A method that is the `unix` file's alone (nothing it does reads or writes the WAL).
macro_rules! passing {
    ($name:ident, $m:ident $(, $arg:ident : $ty:ty)*) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: our open file.
            let w = unsafe { wal(file) };
            unix!(w, $m $(, $arg)*)
        }
    };
}

flushing!(truncate, xTruncate, size: ffi::sqlite3_int64);
flushing!(sync, xSync, flags: c_int);
flushing!(file_size, xFileSize, size: *mut ffi::sqlite3_int64);
flushing!(file_control, xFileControl, op: c_int, arg: *mut c_void);
flushing!(fetch, xFetch, offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void);
passing!(lock, xLock, level: c_int);
passing!(unlock, xUnlock, level: c_int);
passing!(check_reserved_lock, xCheckReservedLock, out: *mut c_int);
passing!(sector_size, xSectorSize);
passing!(device_characteristics, xDeviceCharacteristics);
passing!(unfetch, xUnfetch, offset: ffi::sqlite3_int64, page: *mut c_void);
passing!(shm_map, xShmMap, page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void);
passing!(shm_unmap, xShmUnmap, delete: c_int);

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: our open file.
    let w = unsafe { wal(file) };
    let inner = w.inner;
    // SAFETY: the open `unix` file.
    if let Some(f) = unsafe { (*(*inner).pMethods).xShmBarrier } {
        unsafe { f(inner) }
    }
}

/// A lock change; on a database file, an unlock first writes what its WAL keeps. Frames
/// kept when a write transaction ends (its WAL write lock released) belong to no commit (a
/// commit's are written with its commit frame): a transaction rolled back after it spilled
/// pages. They are written there, while this connection still holds the lock, as they
/// would have been written unjoined, so they never land on frames another connection
/// writes after it. (SQLite asks the WAL itself for no lock.)
unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: our open file; its partner, if any, is open too.
    let f = unsafe { wal(file) };
    if flags & ffi::SQLITE_SHM_UNLOCK != 0 && !f.is_wal && !f.partner.is_null() {
        // The frames of a transaction that did not commit: no error of theirs is the
        // unlock's.
        let _ = flush(unsafe { &mut *f.partner });
    }
    unix!(f, xShmLock, offset, n, flags)
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};
    use std::path::Path;

    thread_local! {
        /// The writes this thread handed the `unix` VFS's WAL files.
        pub(super) static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn writes() -> u64 {
        WRITES.with(std::cell::Cell::get)
    }

    /// A connection in WAL mode as the engine's: through `troupe-wal`, or plain `unix`.
    fn open(path: &Path, joined: bool) -> Connection {
        register().unwrap();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = if joined {
            Connection::open_with_flags_and_vfs(path, flags, NAME).unwrap()
        } else {
            Connection::open_with_flags(path, flags).unwrap()
        };
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn
    }

    fn insert_rows(conn: &Connection, rows: usize, bytes: i64) {
        conn.execute_batch("BEGIN").unwrap();
        for _ in 0..rows {
            conn.execute("INSERT INTO t (body) VALUES (zeroblob(?1))", [bytes])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// Rows, bytes, and `integrity_check`'s verdict, as `conn` reads them.
    fn contents(conn: &Connection) -> (i64, i64, String) {
        let (rows, bytes) = conn
            .query_row("SELECT COUNT(*), SUM(length(body)) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        let verdict = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        (rows, bytes, verdict)
    }

    /// A plain connection to a copy of `dir`'s `t.db` and its WAL, taken without a
    /// checkpoint as a crash leaves them (the copy's directory, kept while it is used).
    fn as_a_crash_leaves_it(dir: &std::path::Path) -> (tempfile::TempDir, Connection) {
        let copy = tempfile::tempdir().unwrap();
        for file in ["t.db", "t.db-wal"] {
            std::fs::copy(dir.join(file), copy.path().join(file)).unwrap();
        }
        let recovered = open(&copy.path().join("t.db"), false);
        (copy, recovered)
    }

    /// What `conn`'s WAL file keeps unwritten.
    fn kept(conn: &Connection) -> usize {
        let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
        // SAFETY: the handle is open; the file control stores the WAL's `sqlite3_file`,
        // which this VFS opened as a `WalFile`, and it stays open while `conn` is.
        unsafe {
            let rc = ffi::sqlite3_file_control(
                conn.handle(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_JOURNAL_POINTER,
                std::ptr::addr_of_mut!(file).cast(),
            );
            assert_eq!(rc, ffi::SQLITE_OK);
            assert!(!file.is_null() && (*file).pMethods == &raw const METHODS);
            wal(file).kept.len()
        }
    }

    /// A commit of many pages is one write to the WAL file, not two a frame.
    #[test]
    fn a_commits_frames_are_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("t.db"), true);
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let before = writes();
        // Ten rows of 3,000 bytes: a page each, and the table's pages above them.
        insert_rows(&conn, 10, 3_000);
        let made = writes() - before;
        // `log`: the frames in the WAL (this checkpoint only reads it).
        let frames: i64 = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .unwrap();
        assert!(frames >= 10, "{frames} frames");
        // The WAL's header (a write of its own), then every frame in one.
        assert_eq!(made, 2, "{made} writes for {frames} frames");
    }

    /// A transaction larger than its cache writes frames before its commit and writes some
    /// pages twice (SQLite then rewrites the frames' checksums after reading them back):
    /// another connection reads every row, and a copy of the files taken without a
    /// checkpoint, as a crash leaves them, recovers every commit from the WAL (which checks
    /// each frame's checksum and stops at the first that does not hold).
    #[test]
    fn spilled_and_rewritten_frames_are_read_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open(&path, true);
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .unwrap();
        conn.pragma_update(None, "cache_size", 5).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for round in 0..3 {
            for _ in 0..200 {
                conn.execute("INSERT INTO t (body) VALUES (zeroblob(900))", [])
                    .unwrap();
            }
            // Pages spilled to the WAL in this transaction, changed again.
            conn.execute(
                "UPDATE t SET body = zeroblob(800 + ?1) WHERE id % 3 = 0",
                [round],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        insert_rows(&conn, 7, 100);
        let expected = contents(&conn);
        assert_eq!(expected.0, 607);
        assert_eq!(expected.2, "ok");

        let plain = open(&path, false);
        assert_eq!(contents(&plain), expected, "read through plain unix");
        drop(plain);

        let (_copy, recovered) = as_a_crash_leaves_it(dir.path());
        assert_eq!(contents(&recovered), expected, "recovered from the WAL");
    }

    /// Frames a transaction wrote before it was rolled back are not written over frames
    /// another connection committed after it: a restart of the WAL by the other connection
    /// (its checkpoint copied everything, so its next write starts the file over) and then
    /// anything this connection asks of the file leave every commit readable.
    #[test]
    fn a_rolled_back_transactions_frames_never_land_on_anothers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open(&path, true);
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .unwrap();
        insert_rows(&conn, 300, 900);
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "cache_size", 5).unwrap();
        // Rows rewritten in place, read from the database file: pages spilled to the WAL
        // and kept, none of them read back when the transaction is undone.
        conn.execute_batch("BEGIN; UPDATE t SET body = randomblob(900); ROLLBACK;")
            .unwrap();
        assert_eq!(kept(&conn), 0, "frames kept after the transaction ended");

        let other = open(&path, false);
        other
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        // More frames than the rolled-back transaction wrote: the file's new frames reach
        // past where its last ones were.
        insert_rows(&other, 600, 900);
        let expected = contents(&other);
        assert_eq!((expected.0, expected.2.as_str()), (900, "ok"));

        // This connection reads the WAL again (and writes it, in a commit of its own).
        assert_eq!(contents(&conn), expected);
        insert_rows(&conn, 1, 10);
        let (_copy, recovered) = as_a_crash_leaves_it(dir.path());
        let (rows, _, verdict) = contents(&recovered);
        assert_eq!(
            (rows, verdict.as_str()),
            (901, "ok"),
            "recovered from the WAL"
        );
    }
}
