//! Pairing codes and their limits (issue 44), as values and pure rules: what a code looks
//! like, how a typed one is read, and the numbers every limit uses. The database keeps the
//! codes (`storage::access`), and applies these limits in the same transaction that issues
//! or approves one, so that replicas and the CLI agree.

/// A code's length.
pub const LEN: usize = 8;
/// The characters of a code: upper-case letters and digits without 0, O, 1 and I, which
/// read alike.
pub const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// How long a code may be approved.
pub const TTL_MS: i64 = 3_600_000;
/// At most this many codes wait per persona and platform; a new one drops the oldest.
pub const MAX_PENDING: i64 = 3;
/// A sender gets at most one new code in this long.
pub const REISSUE_MS: i64 = 600_000;
/// This many wrong approvals within `FAILURE_WINDOW_MS` lock approval for `LOCKOUT_MS`.
pub const MAX_FAILURES: i64 = 5;
pub const FAILURE_WINDOW_MS: i64 = 600_000;
pub const LOCKOUT_MS: i64 = 600_000;
/// A refusal under `allowlist` or `disabled` is said at most once per sender in this long.
pub const REFUSAL_EVERY_MS: i64 = 3_600_000;

/// A new random code.
pub fn new_code() -> String {
    (0..LEN)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A typed code as stored (upper case), or `None` when it cannot be one: the wrong length,
/// or a character outside the alphabet (a look-alike from another script, a 0 for an O).
/// Matching ignores case; nothing else is forgiven.
pub fn normalize(typed: &str) -> Option<String> {
    let typed = typed.trim();
    if typed.chars().count() != LEN || !typed.is_ascii() {
        return None;
    }
    let upper = typed.to_ascii_uppercase();
    upper
        .bytes()
        .all(|b| ALPHABET.contains(&b))
        .then_some(upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_alphabet_and_match_ignoring_case_only() {
        for _ in 0..200 {
            let code = new_code();
            assert_eq!(code.len(), LEN);
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
            assert_eq!(normalize(&code.to_ascii_lowercase()), Some(code));
        }
        assert_eq!(normalize(" abcdefgh "), Some("ABCDEFGH".into()));
        assert_eq!(normalize("ABCDEFG"), None);
        assert_eq!(normalize("ABCDEFGHJ"), None);
        // A zero for an O, a one for an I: not in the alphabet, never approved.
        assert_eq!(normalize("ABCDEFG0"), None);
        assert_eq!(normalize("ABCDEFG1"), None);
        // Cyrillic А and Е look like A and E.
        assert_eq!(normalize("\u{410}BCD\u{415}FGH"), None);
        // A fullwidth letter.
        assert_eq!(normalize("ABCDEFG\u{FF28}"), None);
    }
}
