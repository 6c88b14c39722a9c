//! Splitting a reply that is longer than a platform accepts.
//!
//! Chunks end on the most natural boundary that fits: a paragraph, then a line, then a
//! sentence, then a word, and only as a last resort inside a word. The length is measured by
//! a caller-supplied function, because Discord and Telegram count characters while Farcaster
//! counts bytes. A cut never falls inside a UTF-8 character.

/// Splits `text` into chunks whose `measure` is at most `limit`. Empty input gives no chunk.
pub fn split_text(text: &str, limit: usize, measure: fn(&str) -> usize) -> Vec<String> {
    let text = text.trim();
    let mut chunks = Vec::new();
    if text.is_empty() || limit == 0 {
        return chunks;
    }
    let mut rest = text;
    while measure(rest) > limit {
        let cut = best_cut(rest, limit, measure);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        if !head.is_empty() {
            chunks.push(head.to_string());
        }
        rest = tail.trim_start();
    }
    if !rest.is_empty() {
        chunks.push(rest.to_string());
    }
    chunks
}

/// Counts Unicode scalar values, as Discord and Telegram do (close enough for limits).
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Counts UTF-8 bytes, as Farcaster does.
pub fn bytes(s: &str) -> usize {
    s.len()
}

/// The byte index of the best place to cut `s` so that the head fits in `limit`.
fn best_cut(s: &str, limit: usize, measure: fn(&str) -> usize) -> usize {
    // The largest char boundary whose prefix fits.
    let mut max = 0;
    for (idx, ch) in s.char_indices() {
        let end = idx + ch.len_utf8();
        if measure(&s[..end]) > limit {
            break;
        }
        max = end;
    }
    if max == 0 {
        // Not even one character fits (a limit smaller than a character): take one anyway.
        return s.chars().next().map(char::len_utf8).unwrap_or(s.len());
    }
    let window = &s[..max];
    // Prefer boundaries in the second half of the window, so chunks stay reasonably full.
    let floor = max / 2;
    for sep in ["\n\n", "\n"] {
        if let Some(pos) = window.rfind(sep).filter(|&p| p >= floor) {
            return pos + sep.len();
        }
    }
    let sentence = window
        .char_indices()
        .filter(|&(i, c)| {
            matches!(c, '.' | '!' | '?' | '。')
                && i >= floor
                && window[i + c.len_utf8()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_whitespace)
        })
        .map(|(i, c)| i + c.len_utf8())
        .next_back();
    if let Some(pos) = sentence {
        return pos;
    }
    if let Some(pos) = window.rfind(char::is_whitespace).filter(|&p| p >= floor) {
        return pos + 1;
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_chunk() {
        assert_eq!(split_text("hello", 10, chars), vec!["hello"]);
        assert!(split_text("  ", 10, chars).is_empty());
    }

    #[test]
    fn splits_on_lines_before_words() {
        let text = format!("{}\n{}", "a".repeat(8), "b b b b");
        let chunks = split_text(&text, 12, chars);
        assert_eq!(chunks, vec!["a".repeat(8), "b b b b".to_string()]);
    }

    #[test]
    fn byte_limit_never_cuts_a_character() {
        let text = "é".repeat(400); // 800 bytes
        let chunks = split_text(&text, 320, bytes);
        assert!(chunks.iter().all(|c| c.len() <= 320));
        assert_eq!(chunks.concat(), text);
    }

    #[test]
    fn every_chunk_fits_and_nothing_is_lost() {
        let text = "Sentence one is here. ".repeat(300);
        let chunks = split_text(&text, 2000, chars);
        assert!(chunks.iter().all(|c| chars(c) <= 2000));
        let rejoined: String = chunks.join(" ");
        assert_eq!(
            rejoined.split_whitespace().count(),
            text.split_whitespace().count()
        );
    }
}
