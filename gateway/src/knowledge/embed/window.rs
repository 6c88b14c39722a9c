//! What a local model reads of a long text: its windows.
//!
//! A sentence encoder reads a fixed number of its own tokens (all-MiniLM-L6-v2: 256, the
//! special tokens included) and drops the rest, while a chunk is 400 cl100k tokens, often
//! 450 or more WordPiece tokens: embedded whole, a chunk's vector ignores its last third.
//! So a text longer than the model reads is cut into windows that each fit, overlapping
//! by a few tokens so that no sentence is only ever seen cut in two, and its vector is the
//! mean of the windows' unit vectors (made unit length again by the caller): mean pooling
//! over the whole text, the way the model pools over the tokens of one window.
//!
//! Windows are cut where a word starts (a WordPiece `##` piece is never split from its
//! word), so each window is a piece of the original text that the tokenizer reads back as
//! the same tokens. A text that fits is its own single window, unchanged: its vector is
//! the one it had before windows existed, and a memo of vectors by text (the Vaswani
//! test's cache) still finds it. The last window is a full one, ending with the text, so
//! that every window weighs as much in the mean.

use tokenizers::Tokenizer;

/// Tokens two consecutive windows share.
pub(super) const OVERLAP: usize = 32;

/// How a model's reading budget is spent: its longest input, less its special tokens.
#[derive(Clone)]
pub(super) struct Windower {
    tokenizer: Tokenizer,
    /// Tokens of text one window holds, special tokens left out.
    room: usize,
}

impl Windower {
    /// For `tokenizer` (without truncation or padding) and a model reading `max_tokens`.
    pub(super) fn new(mut tokenizer: Tokenizer, max_tokens: usize) -> Result<Windower, String> {
        tokenizer
            .with_truncation(None)
            .map_err(|e| format!("tokenizer truncation: {e}"))?;
        tokenizer.with_padding(None);
        let specials = tokenizer
            .encode("", true)
            .map_err(|e| format!("tokenizing: {e}"))?
            .len();
        Ok(Windower {
            tokenizer,
            room: max_tokens.saturating_sub(specials).max(1),
        })
    }

    /// `text`'s windows, each of at most the model's reading less `prefix` (the model
    /// profile's marker, put before each window): `[text]` itself when it fits.
    pub(super) fn windows(&self, prefix: &str, text: &str) -> Result<Vec<String>, String> {
        let count = |t: &str| {
            self.tokenizer
                .encode(t, false)
                .map_err(|e| format!("tokenizing: {e}"))
        };
        let budget = self.room.saturating_sub(count(prefix)?.len()).max(1);
        let encoding = count(text)?;
        if encoding.len() <= budget {
            return Ok(vec![text.to_string()]);
        }
        let word_ids = encoding.get_word_ids();
        let starts: Vec<bool> = (0..encoding.len())
            .map(|i| i == 0 || word_ids[i].is_none() || word_ids[i] != word_ids[i - 1])
            .collect();
        let offsets = encoding.get_offsets();
        Ok(spans(&starts, budget, OVERLAP.min(budget / 2))
            .into_iter()
            .filter_map(|(s, e)| text.get(offsets[s].0..offsets[e - 1].1))
            .map(str::to_string)
            .collect())
    }
}

/// Token ranges `[start, end)` of windows over tokens whose word starts are `starts`: each
/// at most `budget` tokens, beginning and ending on word boundaries when the words allow
/// (a word longer than the budget is cut), consecutive ones sharing about `overlap`
/// tokens, the last one the final `budget` tokens.
fn spans(starts: &[bool], budget: usize, overlap: usize) -> Vec<(usize, usize)> {
    let n = starts.len();
    let word_start_at_or_after = |mut i: usize, limit: usize| {
        while i < limit && !starts[i] {
            i += 1;
        }
        i
    };
    let mut out = Vec::new();
    let mut s = 0;
    loop {
        if n - s <= budget {
            // The last window: the final `budget` tokens from a word's start, or from
            // this window's start when no word starts earlier within reach.
            let last = word_start_at_or_after(n.saturating_sub(budget), n);
            out.push((last.min(s), n));
            return out;
        }
        // End where the next word starts, at most `budget` tokens on.
        let mut e = s + budget;
        while e > s + 1 && !starts[e] {
            e -= 1;
        }
        if e == s + 1 && !starts[e] {
            e = s + budget;
        }
        out.push((s, e));
        s = word_start_at_or_after(e.saturating_sub(overlap).max(s + 1), e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BERT-like tokenizer whose every word is one token per letter (`a ##b ##c`), with
    /// `[CLS]` and `[SEP]` around a text: word boundaries are easy to see in the tests.
    fn letters() -> Tokenizer {
        let mut vocab = serde_json::Map::new();
        for (i, t) in ["[UNK]", "[CLS]", "[SEP]"].into_iter().enumerate() {
            vocab.insert(t.into(), i.into());
        }
        for c in 'a'..='z' {
            let n = vocab.len();
            vocab.insert(c.to_string(), n.into());
            vocab.insert(format!("##{c}"), (n + 1).into());
        }
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "decoder": null,
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab},
        });
        Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_text_that_fits_is_its_own_window() {
        let w = Windower::new(letters(), 12).unwrap();
        // 10 tokens of text and 2 special ones.
        let text = "abcde fghij";
        assert_eq!(w.windows("", text).unwrap(), vec![text.to_string()]);
        // A prefix takes its share of the room.
        assert_eq!(w.windows("ab ", text).unwrap().len(), 2);
    }

    #[test]
    fn long_texts_are_cut_between_words_into_overlapping_full_windows() {
        let w = Windower::new(letters(), 66).unwrap();
        let words: Vec<String> = (0..60)
            .map(|i| "abcdefgh"[..2 + i % 5].to_string())
            .collect();
        let text = words.join(" ");
        let windows = w.windows("", &text).unwrap();
        assert!(windows.len() >= 3, "{windows:?}");
        let tokens = |t: &str| w.tokenizer.encode(t, false).unwrap().len();
        for win in &windows {
            // Within the room, whole words (a piece of the text between spaces).
            assert!(tokens(win) <= 64, "{win}");
            assert!(text.contains(win.as_str()));
            assert!(text.starts_with(win.as_str()) || text.contains(&format!(" {win}")));
            assert!(text.ends_with(win.as_str()) || text.contains(&format!("{win} ")));
        }
        assert!(text.starts_with(&windows[0]));
        assert!(text.ends_with(windows.last().unwrap()));
        // The last window is a full one, and every word is in some window.
        assert!(tokens(windows.last().unwrap()) > 64 - 8);
        let all = windows.join(" ");
        assert!(words.iter().all(|word| all.contains(word.as_str())));
    }

    #[test]
    fn spans_cover_everything_and_always_advance() {
        // One word longer than the budget is cut; every token is in a window.
        let mut starts = vec![false; 50];
        starts[0] = true;
        starts[45] = true;
        let cut = spans(&starts, 16, 4);
        assert_eq!(cut.first().unwrap().0, 0);
        assert_eq!(cut.last().unwrap().1, 50);
        for pair in cut.windows(2) {
            assert!(pair[1].0 > pair[0].0 && pair[1].0 <= pair[0].1, "{cut:?}");
        }
        assert!(cut.iter().all(|(s, e)| e - s <= 16 && s < e), "{cut:?}");
    }
}
