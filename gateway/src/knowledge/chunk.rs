//! Chunking: a document's text cut into overlapping pieces of at most N tokens.
//!
//! Sizes are counted in OpenAI's cl100k_base tokens (tiktoken-rs ships the vocabulary in
//! the crate, so nothing is downloaded), because both the prompt budget and the embedding
//! models' input limits are in tokens. Markdown is cut at its own structure (headings,
//! paragraphs, list items) before sentences; everything else at blank lines, lines,
//! sentences, then words, by `text-splitter`.
//!
//! Cost must stay linear in the input, whatever its shape. The splitter rescans what
//! remains of its input for every chunk it cuts (the first sentence or word of the rest, at
//! each level), so a 20 MB single line cost 20 MB of scanning per chunk, and BPE is
//! quadratic in a run without whitespace (one megabyte of `aaaa…` took minutes). So:
//! - the text goes to the splitter in windows of at most [`WINDOW_BYTES`], cut at a blank
//!   line, else a line end, near the end of each;
//! - a line longer than [`LONG_LINE_BYTES`] (a CSV row a million columns wide, minified
//!   JSON, base64) does not go to the splitter: it is cut into pieces before whitespace and
//!   the pieces are packed greedily into chunks, with the same token size and overlap;
//! - tokens are counted in pieces of at most [`PIECE_BYTES`], cut before whitespace where
//!   there is any (tiktoken's own pieces begin at whitespace, so ordinary text counts the
//!   same), and counting stops once a candidate is over the chunk size.
//!
//! A window's end is a chunk's end, without overlap across it; windows are cut at blank
//! lines first and are hundreds of kilobytes long, so that is rare and at a paragraph.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::LazyLock;

use text_splitter::{ChunkConfig, ChunkSizer, MarkdownSplitter, TextSplitter};
use tiktoken_rs::CoreBPE;

use super::extract::Format;

/// The tokenizer, built once: building it parses a 100k-entry vocabulary.
static CL100K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::cl100k_base().ok());

/// The most text the splitter sees at once.
const WINDOW_BYTES: usize = 256 * 1024;
/// Lines longer than this are chunked by [`pack`], not by the splitter.
const LONG_LINE_BYTES: usize = 8 * 1024;
/// The longest piece of text tokenized at once.
const PIECE_BYTES: usize = 256;

/// Cuts `text` into chunks of at most `tokens` tokens sharing `overlap` tokens with their
/// neighbours. Empty and whitespace-only pieces are dropped.
pub(crate) fn chunk(format: Format, text: &str, tokens: usize, overlap: usize) -> Vec<String> {
    let tokens = tokens.max(1);
    let overlap = overlap.min(tokens - 1);
    let bpe = CL100K.as_ref();
    let count = |piece: &str| match bpe {
        Some(bpe) => bpe.encode_ordinary(piece).len(),
        // Only if the bundled vocabulary failed to load: about four characters per token.
        None => piece.chars().count().div_ceil(4),
    };
    let mut out = Vec::new();
    for segment in windows(text, WINDOW_BYTES).flat_map(|w| segments(w, LONG_LINE_BYTES)) {
        let pieces: Vec<&str> = match segment {
            Segment::LongLine(line) => pack(line, tokens, overlap, count),
            Segment::Lines(lines) => match bpe {
                Some(bpe) => split(
                    format,
                    lines,
                    config(tokens, overlap).with_sizer(Cl100k::new(bpe, tokens)),
                ),
                None => split(format, lines, config(tokens * 4, overlap * 4)),
            },
        };
        out.extend(
            pieces
                .into_iter()
                .filter(|p| !p.trim().is_empty())
                .map(str::to_string),
        );
    }
    out
}

/// A window's parts: runs of ordinary lines for the splitter, and single long lines.
#[derive(Debug, PartialEq, Eq)]
enum Segment<'a> {
    Lines(&'a str),
    LongLine(&'a str),
}

/// `window` cut into runs of lines of at most `long` bytes and, apart, each longer line.
fn segments(window: &str, long: usize) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    let (mut start, mut at) = (0, 0);
    for line in window.split_inclusive('\n') {
        if line.len() > long {
            if at > start {
                out.push(Segment::Lines(&window[start..at]));
            }
            out.push(Segment::LongLine(line));
            start = at + line.len();
        }
        at += line.len();
    }
    if at > start {
        out.push(Segment::Lines(&window[start..at]));
    }
    out
}

/// One long line as chunks: cut into pieces before whitespace (each at most `tokens`
/// bytes, so at most `tokens` tokens), packed greedily up to `tokens` tokens, the next
/// chunk starting with the pieces of the last `overlap` tokens. Linear: each piece is
/// counted once.
fn pack(line: &str, tokens: usize, overlap: usize, count: impl Fn(&str) -> usize) -> Vec<&str> {
    let base = line.as_ptr() as usize;
    let sized: Vec<(usize, usize, usize)> = pieces(line, tokens.clamp(4, PIECE_BYTES))
        .map(|p| {
            let start = p.as_ptr() as usize - base;
            (start, start + p.len(), count(p))
        })
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sized.len() {
        let (mut j, mut used) = (i, 0);
        while j < sized.len() && (j == i || used + sized[j].2 <= tokens) {
            used += sized[j].2;
            j += 1;
        }
        out.push(line[sized[i].0..sized[j - 1].1].trim());
        if j == sized.len() {
            break;
        }
        // Back from the end while the overlap allows, always moving forward.
        let (mut k, mut shared) = (j, 0);
        while k > i + 1 && shared + sized[k - 1].2 <= overlap {
            shared += sized[k - 1].2;
            k -= 1;
        }
        i = k;
    }
    out
}

/// cl100k token counts, in pieces of at most [`PIECE_BYTES`], and only up to just past
/// `stop_after`: the splitter needs the exact size of what fits and only "too big" for
/// the rest.
///
/// The splitter sizes many candidates that start at the same place (a binary search over
/// where the chunk ends), and those are cut into the same pieces, so each piece's count is
/// kept, by its place in the window: the window is counted about once.
struct Cl100k<'a> {
    bpe: &'a CoreBPE,
    stop_after: usize,
    /// Token counts by (address, length) of a piece of this window's text.
    counted: RefCell<HashMap<(usize, usize), usize>>,
}

impl<'a> Cl100k<'a> {
    fn new(bpe: &'a CoreBPE, stop_after: usize) -> Self {
        Cl100k {
            bpe,
            stop_after,
            counted: RefCell::new(HashMap::new()),
        }
    }
}

impl ChunkSizer for Cl100k<'_> {
    fn size(&self, chunk: &str) -> usize {
        let mut counted = self.counted.borrow_mut();
        let mut count = 0;
        for piece in pieces(chunk, PIECE_BYTES) {
            count += *counted
                .entry((piece.as_ptr() as usize, piece.len()))
                .or_insert_with(|| self.bpe.encode_ordinary(piece).len());
            if count > self.stop_after {
                break;
            }
        }
        count
    }
}

/// `text` cut into consecutive pieces of at most `max` bytes (a piece is longer only when
/// one character is), each cut before the last whitespace in reach, or at a character
/// boundary when there is none.
fn pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    cut(text, max, |head| {
        head.char_indices()
            .rev()
            .find(|&(i, c)| i > 0 && c.is_whitespace())
            .map(|(i, _)| i)
    })
}

/// `text` cut into windows of at most `max` bytes, each cut after the last blank line, else
/// line end, in its second half; else before the last whitespace (inside a long line,
/// which [`pack`] cuts there anyway), else at a character boundary.
fn windows(text: &str, max: usize) -> impl Iterator<Item = &str> {
    cut(text, max, |head| {
        let half = head.len() / 2;
        let after = |i: Option<usize>, len: usize| i.map(|i| i + len).filter(|&i| i > half);
        after(head.rfind("\n\n"), 2)
            .or_else(|| after(head.rfind('\n'), 1))
            .or_else(|| head.rfind(char::is_whitespace))
    })
}

/// Consecutive pieces of `text` of at most `max` bytes; `at` picks the cut within the
/// first `max` bytes (by byte offset, on a character boundary, not 0), else the cut is the
/// last character boundary in reach.
fn cut(text: &str, max: usize, at: impl Fn(&str) -> Option<usize>) -> impl Iterator<Item = &str> {
    let max = max.max(4);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max {
            return Some(std::mem::take(&mut rest));
        }
        let mut reach = max;
        while !rest.is_char_boundary(reach) {
            reach -= 1;
        }
        let end = at(&rest[..reach]).filter(|&i| i > 0).unwrap_or(reach);
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

fn config(size: usize, overlap: usize) -> ChunkConfig<text_splitter::Characters> {
    ChunkConfig::new(size)
        .with_overlap(overlap)
        .unwrap_or_else(|_| ChunkConfig::new(size))
}

fn split<S: ChunkSizer>(format: Format, text: &str, config: ChunkConfig<S>) -> Vec<&str> {
    match format {
        // HTML is extracted as light Markdown (see extract::html).
        Format::Markdown | Format::Html => MarkdownSplitter::new(config).chunks(text).collect(),
        _ => TextSplitter::new(config).chunks(text).collect(),
    }
}

/// Tokens in `text`, as the chunker counts them.
#[cfg(test)]
pub(crate) fn count_tokens(text: &str) -> usize {
    match CL100K.as_ref() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.chars().count().div_ceil(4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_the_token_size_and_overlap() {
        let sentence = "The lighthouse keeper logs every passing ship in a leather book. ";
        let text = sentence.repeat(200);
        let chunks = chunk(Format::Text, &text, 50, 10);
        assert!(chunks.len() > 10, "{}", chunks.len());
        for c in &chunks {
            assert!(count_tokens(c) <= 50, "{} tokens: {c}", count_tokens(c));
        }
        // Neighbours overlap: the end of one chunk starts the next.
        let tail: String = chunks[0].split_whitespace().last().unwrap().to_string();
        assert!(
            chunks[1].contains(&tail),
            "{:?} / {:?}",
            chunks[0],
            chunks[1]
        );
    }

    #[test]
    fn a_short_text_is_one_chunk() {
        let chunks = chunk(Format::Text, "  The office opens at nine.  ", 400, 50);
        assert_eq!(chunks, vec!["The office opens at nine."]);
        assert!(chunk(Format::Text, " \n ", 400, 50).is_empty());
    }

    #[test]
    fn markdown_is_cut_at_headings() {
        let section = |title: &str, word: &str| {
            format!(
                "# {title}\n\n{}\n\n",
                format!("{word} is a word. ").repeat(30)
            )
        };
        let text = format!("{}{}", section("Tides", "tide"), section("Lamps", "lamp"));
        let chunks = chunk(Format::Markdown, &text, 250, 0);
        assert_eq!(chunks.len(), 2, "{chunks:#?}");
        assert!(chunks[0].starts_with("# Tides") && !chunks[0].contains("lamp"));
        assert!(chunks[1].starts_with("# Lamps"));
    }

    #[test]
    fn a_megabyte_without_whitespace_is_cut_into_bounded_chunks() {
        let word = "a".repeat(1 << 20);
        let chunks = chunk(Format::Text, &word, 400, 50);
        assert!(chunks.len() > 100, "{}", chunks.len());
        // Nothing lost: without whitespace to share, the chunks tile the word.
        assert!(chunks.iter().map(String::len).sum::<usize>() >= word.len());
        for c in &chunks {
            assert!(c.bytes().all(|b| b == b'a'));
            assert!(count_tokens(c) <= 400, "{} tokens", count_tokens(c));
        }
    }

    #[test]
    fn a_long_single_line_is_chunked_like_any_text() {
        // A wide CSV row as the extractor writes it: one line, 200k `column: value` pairs.
        let line: String = (0..200_000).map(|i| format!("c{i}: v{i}; ")).collect();
        let chunks = chunk(Format::Csv, &line, 400, 50);
        for c in &chunks {
            assert!(count_tokens(c) <= 400, "{} tokens", count_tokens(c));
        }
        assert!(chunks[0].starts_with("c0: v0;"), "{}", &chunks[0][..40]);
        assert!(chunks.last().unwrap().ends_with("c199999: v199999;"));
    }

    #[test]
    fn pieces_and_windows_cover_the_text_on_good_cuts() {
        let text = "one two three\n\nfour five six\nseven é";
        for max in [4, 5, 7, 10, 64] {
            assert_eq!(pieces(text, max).collect::<String>(), text);
            assert_eq!(windows(text, max).collect::<String>(), text);
            assert!(windows(text, max).all(|w| w.len() <= max.max(4)));
        }
        let w: Vec<&str> = windows(text, 20).collect();
        assert_eq!(w[0], "one two three\n\n");
        let p: Vec<&str> = pieces("alpha beta gamma", 12).collect();
        assert_eq!(p, vec!["alpha beta", " gamma"]);
        assert_eq!(
            segments("a\nbb\nlong line here\nc\n", 8),
            vec![
                Segment::Lines("a\nbb\n"),
                Segment::LongLine("long line here\n"),
                Segment::Lines("c\n"),
            ]
        );
    }

    #[test]
    fn a_long_line_is_packed_with_overlap() {
        let line = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
        // One token per word with this count; pieces of at most 4 bytes are the words.
        let words = |p: &str| p.split_whitespace().count();
        let chunks = pack(line, 4, 1, words);
        assert_eq!(chunks, vec!["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]);
        assert_eq!(
            pack(line, 4, 0, words),
            vec!["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
        );
    }

    #[test]
    fn chunking_is_deterministic() {
        let text = "alpha beta gamma delta. ".repeat(500);
        assert_eq!(
            chunk(Format::Text, &text, 64, 8),
            chunk(Format::Text, &text, 64, 8)
        );
    }
}
