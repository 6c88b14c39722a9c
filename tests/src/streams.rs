//! What the streaming tests share on every platform: an answer long enough to arrive in
//! many pieces, a reply's messages read as one text, and the edit pace checked.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// An answer long enough to arrive in many pieces (about three words each).
pub fn long_answer(words: usize) -> String {
    (0..words)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The texts of a reply's messages, trimmed and joined by spaces.
pub fn joined<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    texts
        .into_iter()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

/// No two edits of one message (its id, when the fake took it) closer than `pace_ms`, less
/// 20 ms for the fake's own timing.
pub fn assert_paced<M: PartialEq + Debug>(edits: &[(M, Instant)], pace_ms: u64) {
    for pair in edits.windows(2) {
        if pair[0].0 == pair[1].0 {
            let gap = pair[1].1.duration_since(pair[0].1);
            assert!(
                gap >= Duration::from_millis(pace_ms - 20),
                "two edits {gap:?} apart, under TROUPE_STREAM_EDIT_MS={pace_ms}: {edits:#?}"
            );
        }
    }
}
