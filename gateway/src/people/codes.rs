//! `/link` codes: how one is made and read, and the rule on wrong entries. Pure functions
//! of the time they are given (the chat command passes its `now_ms`), so expiry and the
//! lockout are tested without waiting.

use rand::Rng;

/// Letters and digits without 0, O, 1 and I, which read alike.
pub(crate) const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
pub(crate) const CODE_LEN: usize = 8;
/// How long a code may be entered, and confirmed, after `/link` gave it.
pub(crate) const CODE_TTL_MS: i64 = 10 * 60 * 1000;
/// Wrong entries an account may make in [`TRY_WINDOW_MS`] before entries are refused.
pub(crate) const MAX_TRIES: i64 = 5;
/// The window wrong entries are counted in, from the first; the lockout ends with it.
pub(crate) const TRY_WINDOW_MS: i64 = 10 * 60 * 1000;

/// A fresh code.
pub(crate) fn new_code() -> String {
    let mut rng = rand::rng();
    (0..CODE_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// `text` as a code: upper-cased ASCII, exactly [`CODE_LEN`] characters of [`ALPHABET`].
/// `None` for anything else, look-alike letters from other scripts included.
pub(crate) fn read_code(text: &str) -> Option<String> {
    let code = text.trim().to_ascii_uppercase();
    (code.len() == CODE_LEN && code.bytes().all(|b| ALPHABET.contains(&b))).then_some(code)
}

/// Wrong entries so far: how many, and when the window they count in began.
pub(crate) type Failures = Option<(i64, i64)>;

/// Whether entries are refused at `now_ms`: [`MAX_TRIES`] wrong ones in a window that has
/// not ended.
pub(crate) fn locked(failures: Failures, now_ms: i64) -> bool {
    failures.is_some_and(|(n, start)| n >= MAX_TRIES && now_ms < start + TRY_WINDOW_MS)
}

/// The count after one more wrong entry at `now_ms`: a window that ended starts over.
pub(crate) fn after_failure(failures: Failures, now_ms: i64) -> (i64, i64) {
    match failures {
        Some((n, start)) if now_ms < start + TRY_WINDOW_MS => (n + 1, start),
        _ => (1, now_ms),
    }
}

/// Whole minutes (at least one) until the lockout of `failures` ends.
pub(crate) fn minutes_left(failures: Failures, now_ms: i64) -> i64 {
    let end = failures.map_or(now_ms, |(_, start)| start + TRY_WINDOW_MS);
    ((end - now_ms).max(0) + 59_999) / 60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_alphabet_and_read_back_ignoring_case() {
        for _ in 0..100 {
            let code = new_code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
            assert_eq!(read_code(&code.to_lowercase()), Some(code.clone()));
            assert_eq!(read_code(&format!("  {code} ")), Some(code));
        }
    }

    #[test]
    fn look_alikes_and_wrong_lengths_are_not_codes() {
        // Cyrillic А and Е look like A and E; the fullwidth Ａ too.
        for text in [
            "АBCDEFGH",
            "ABCDЕFGH",
            "ＡBCDEFGH",
            "ABCDEFG",
            "ABCDEFGHJ",
            "ABCD0FGH",
            "ABCD EFG",
            "",
        ] {
            assert_eq!(read_code(text), None, "{text:?}");
        }
    }

    #[test]
    fn five_wrong_entries_lock_until_the_window_ends() {
        let t0 = 1_000_000;
        let mut failures: Failures = None;
        for i in 0..MAX_TRIES {
            assert!(!locked(failures, t0 + i), "locked after {i}");
            failures = Some(after_failure(failures, t0 + i));
        }
        assert!(locked(failures, t0 + MAX_TRIES));
        assert!(locked(failures, t0 + TRY_WINDOW_MS - 1));
        assert_eq!(minutes_left(failures, t0 + 60_000), 9);
        assert!(!locked(failures, t0 + TRY_WINDOW_MS));
        // The next wrong entry after the window starts a new count.
        assert_eq!(
            after_failure(failures, t0 + TRY_WINDOW_MS),
            (1, t0 + TRY_WINDOW_MS)
        );
    }
}
