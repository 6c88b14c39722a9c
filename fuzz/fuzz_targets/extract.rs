//! libFuzzer target: an upload through `troupe::fuzzing::extract` (detect, extract, chunk).
//!
//! The PDF reader catches pdf-extract's panics on purpose (a broken PDF is a 422), but
//! libfuzzer-sys's panic hook aborts on every panic, caught or not. Here the hook only
//! remembers the message (and prints each new panic location once, so caught panics are
//! still visible in the log); a panic that escapes `extract` aborts, as it would kill the
//! ingest task or the worker.
#![no_main]

use std::cell::RefCell;
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

thread_local! {
    static LAST: RefCell<String> = const { RefCell::new(String::new()) };
}

static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

libfuzzer_sys::fuzz_target!(
    init: {
        panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = format!("panicked at {at}: {info}");
            let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
            if seen.get_or_insert_with(HashSet::new).insert(at) {
                eprintln!("extract target: a panic (caught or not): {message}");
            }
            LAST.with(|l| *l.borrow_mut() = message);
        }));
    },
    |data: &[u8]| {
        if panic::catch_unwind(AssertUnwindSafe(|| troupe::fuzzing::extract(data))).is_err() {
            LAST.with(|l| eprintln!("extract target: a panic escaped extraction: {}", l.borrow()));
            std::process::abort();
        }
    }
);
