//! Chunking: a document's text cut into overlapping pieces of at most N tokens.
//!
//! Sizes are counted in OpenAI's cl100k_base tokens (tiktoken-rs ships the vocabulary in
//! the crate, so nothing is downloaded), because both the prompt budget and the embedding
//! models' input limits are in tokens. A chunk ends at the strongest boundary within its
//! size: a Markdown heading (higher levels first), then a blank line, a list item, a line
//! end, a sentence end, a word; the next chunk starts on a word boundary so that it shares
//! at most the overlap with the one before.
//!
//! Cost is linear in the input, whatever its shape, and tokenizing does not dominate it:
//! - the text is read once, as a stream of *pieces*: a run of whitespace and the run of
//!   non-whitespace after it (" lighthouse", "\n\n##"). A run longer than [`MAX_PIECE`]
//!   bytes (a megabyte of `aaaa…`, base64, minified JSON) is cut into pieces of that size;
//! - a piece's token count is cl100k's count of that piece alone, remembered per distinct
//!   piece ([`Counts`]): text repeats its words, so BPE (whose regex pre-split is slow,
//!   about 2–7 MB/s here) runs once per word, not once per occurrence;
//! - a chunk's size is the sum of its pieces' counts. tiktoken's own pre-split pieces start
//!   at whitespace too, so the sum is its count of the chunk, except where a punctuation
//!   run is followed by a line break (counted as two tokens instead of one: an over-count)
//!   and where a long run was cut (either way). Only chunks holding such a cut are counted
//!   again exactly, and shortened if they are over;
//! - only the pieces of the chunk being cut are kept (a queue), so memory is bounded by
//!   the chunk size, not the document;
//! - the same memory holds each piece's *terms* for the keyword index (the analyzer's
//!   stems, [`terms_into`]), so [`chunk_with_terms`] gives each chunk's terms from the
//!   lookup that counted it. A second lookup per word, by the analyzer, cost as much as the
//!   first (both wait on memory), and it ran on tantivy's one indexing thread. A piece's
//!   terms are the chunk's terms over that piece, since pieces meet at whitespace, where no
//!   word continues; a chunk holding a cut inside a run (where a word may continue) is
//!   analyzed whole instead.

use std::collections::VecDeque;
use std::sync::{LazyLock, Mutex, TryLockError};

use rustc_hash::FxHashMap;
use tiktoken_rs::{CoreBPE, Rank, byte_pair_split};

use super::analyzer::{terms, terms_into};
use super::extract::Format;
use super::memo::{Hot, packed};

/// The tokenizer, built once: building it parses a 100k-entry vocabulary.
static CL100K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::cl100k_base().ok());

/// cl100k's vocabulary as a map from bytes to rank, for BPE of a piece that tiktoken's
/// pre-split leaves whole (a word with its leading space), without its regex.
static RANKS: LazyLock<Option<FxHashMap<Vec<u8>, Rank>>> = LazyLock::new(|| {
    let bpe = CL100K.as_ref()?;
    let mut ranks = FxHashMap::default();
    // cl100k's ordinary tokens are ranks 0..100256; a gap is skipped.
    for rank in 0..100_256 {
        if let Ok(bytes) = bpe.decode_bytes(&[rank]) {
            ranks.insert(bytes, rank);
        }
    }
    Some(ranks)
});

/// The longest piece, in bytes (a piece is longer only when one character is). Small
/// enough that a piece never holds more tokens than a chunk may (bytes bound tokens), and
/// that BPE of a piece is cheap.
const MAX_PIECE: usize = 64;
/// Distinct pieces whose counts (and, for short ones, terms) the memory keeps; past it the
/// memory is dropped and starts again (a few MB at most: a short piece's entry is 32 bytes,
/// and pieces are at most [`MAX_PIECE`] bytes).
const MAX_REMEMBERED: usize = 200_000;
/// How many times a chunk over its size after an exact count is shortened by a piece before
/// it is cut at the size by the estimate alone (never reached in practice: an estimate is
/// off by a token or two).
const MAX_SHORTENINGS: usize = 16;

/// Cuts `text` into chunks of at most `tokens` tokens sharing `overlap` tokens with their
/// neighbours. Empty and whitespace-only pieces are dropped.
pub(crate) fn chunk(format: Format, text: &str, tokens: usize, overlap: usize) -> Vec<String> {
    let mut out = Vec::new();
    each_chunk(format, text, (tokens, overlap), |c, _| {
        out.push(c.to_string())
    });
    out
}

/// [`chunk`], each chunk with its terms for the keyword index (see the module comment).
pub(crate) fn chunk_with_terms(
    format: Format,
    text: &str,
    tokens: usize,
    overlap: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    each_chunk(format, text, (tokens, overlap), |c, pieces| {
        out.push((c.to_string(), terms_of(text, c, pieces)));
    });
    out
}

/// The chunks of `text` into `emit`, each with its pieces, counted with the process's
/// memory.
fn each_chunk<'t>(
    format: Format,
    text: &'t str,
    size: (usize, usize),
    emit: impl FnMut(&'t str, std::collections::vec_deque::Iter<'_, Piece>),
) {
    let markdown = matches!(format, Format::Markdown | Format::Html);
    with_counts(|counts| cut(text, markdown, size, |p| counts.count(p), emit));
}

/// Runs `f` with the process's count memory, or with a memory of its own when another
/// document holds it.
fn with_counts(f: impl FnOnce(&mut Counts)) {
    let mut own = None;
    let mut shared = match COUNTS.try_lock() {
        Ok(counts) => Some(counts),
        // Counting leaves the memory whole at every step.
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    let counts = match shared.as_deref_mut() {
        Some(counts) => counts,
        None => own.insert(Counts::default()),
    };
    f(counts);
}

/// The terms of `chunk` (a trimmed slice of `text` over `pieces`): the pieces' terms
/// from memory, one after the other, or the chunk analyzed whole when a piece after its
/// first starts inside a run.
fn terms_of<'p>(text: &str, chunk: &str, pieces: impl Iterator<Item = &'p Piece>) -> String {
    // Bytes first, checked as UTF-8 once per chunk rather than once per piece.
    let mut out: Vec<u8> = Vec::with_capacity(chunk.len());
    let mut scratch = String::new();
    let mut first = true;
    for p in pieces {
        if p.level == Level::Forced && !first {
            return terms(chunk);
        }
        first = false;
        let seen = p.seen.to_le_bytes();
        let len = seen[15] & 0x0F;
        if len == NO_TERMS {
            scratch.clear();
            terms_into(&text[p.start..p.end], &mut scratch);
            out.extend_from_slice(scratch.as_bytes());
        } else {
            out.extend_from_slice(&seen[..usize::from(len)]);
        }
    }
    // Whole characters were packed; should that ever fail, the chunk is analyzed whole.
    String::from_utf8(out).unwrap_or_else(|_| terms(chunk))
}

/// What is remembered of a piece of at most 15 bytes, in one `u128`: its terms (each
/// followed by a space) in the low bytes, and in the top byte their length (low nibble;
/// [`NO_TERMS`]: they did not fit) and the piece's token count (high nibble: at most 15,
/// since a token is at least a byte). Longer pieces remember only their count.
const NO_TERMS: u8 = 15;

fn remember(tokens: usize, terms: Option<&str>) -> u128 {
    let mut bytes = [0u8; 16];
    let len = match terms {
        Some(t) if t.len() < usize::from(NO_TERMS) => {
            bytes[..t.len()].copy_from_slice(t.as_bytes());
            t.len() as u8
        }
        _ => NO_TERMS,
    };
    bytes[15] = len | (tokens.min(15) as u8) << 4;
    u128::from_le_bytes(bytes)
}

fn remembered_tokens(seen: u128) -> usize {
    usize::from(seen.to_le_bytes()[15] >> 4)
}

/// Slots of the count memory's [`Hot`] table: 65,536 (2 MiB). The pieces of a text are
/// its words with their spacing and punctuation (" keeper", " keeper.", "\nKeeper"), several
/// per word, and a table that misses sends the lookup to the full memory, which waits on
/// memory twice (measured in docs/benchmarks.md).
const COUNTS_HOT: usize = 65_536;

/// The process's count memory: one, not one per thread, so that a document read on
/// another of the runtime's blocking threads does not start cold. Held for one document at
/// a time; a document that finds it held counts with a memory of its own.
static COUNTS: LazyLock<Mutex<Counts>> = LazyLock::new(|| Mutex::new(Counts::default()));

/// What pieces hold, remembered per distinct piece (`memo`): a piece of at most 15 bytes
/// (most words) is its own key, with a [`Hot`] table in front, and its token count and
/// terms are one value ([`remember`]); a longer piece keeps its count.
#[derive(Default)]
struct Counts {
    hot: Hot<u128, COUNTS_HOT>,
    short: FxHashMap<u128, u128>,
    long: FxHashMap<Box<str>, u32>,
}

impl Counts {
    /// The piece's token count, and what is remembered of it (see [`remember`]).
    fn count(&mut self, piece: &str) -> (usize, u128) {
        if let Some(key) = packed(piece.as_bytes()) {
            if let Some(seen) = self.hot.get(key) {
                return (remembered_tokens(seen), seen);
            }
            let seen = match self.short.get(&key) {
                Some(&seen) => seen,
                None => {
                    let seen = remember(piece_tokens(piece), Some(&terms(piece)));
                    if self.short.len() >= MAX_REMEMBERED {
                        self.short.clear();
                    }
                    self.short.insert(key, seen);
                    seen
                }
            };
            self.hot.put(key, seen);
            return (remembered_tokens(seen), seen);
        }
        let n = match self.long.get(piece) {
            Some(&n) => n as usize,
            None => {
                let n = piece_tokens(piece);
                if self.long.len() >= MAX_REMEMBERED {
                    self.long.clear();
                }
                self.long.insert(piece.into(), saturate(n));
                n
            }
        };
        (n, remember(0, None))
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// cl100k's count of one piece. A word with at most one leading space or punctuation
/// character is one match of tiktoken's pre-split regex, so it goes to BPE directly;
/// anything else through the full encoder.
fn piece_tokens(piece: &str) -> usize {
    let bytes = piece.as_bytes();
    let letters = match bytes.first() {
        Some(&b) if b.is_ascii_alphabetic() => bytes,
        Some(&b) if b != b'\'' && b != b'\r' && b != b'\n' && !b.is_ascii_alphanumeric() => {
            &bytes[1..]
        }
        _ => &[][..],
    };
    if !letters.is_empty()
        && letters.iter().all(u8::is_ascii_alphabetic)
        && let Some(ranks) = RANKS.as_ref()
    {
        return if ranks.contains_key(bytes) {
            1
        } else {
            byte_pair_split(bytes, ranks).len()
        };
    }
    exact(piece)
}

/// cl100k's count of `text`.
fn exact(text: &str) -> usize {
    match CL100K.as_ref() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        // Only if the bundled vocabulary failed to load: about four characters per token.
        None => text.chars().count().div_ceil(4),
    }
}

/// A piece of the text: `start..end`, its tokens, and the strength of the boundary before
/// it.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: usize,
    end: usize,
    tokens: usize,
    level: Level,
    /// What memory holds of it (its terms, when short: [`remember`]).
    seen: u128,
}

/// The boundary before a piece, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    /// Inside a run longer than [`MAX_PIECE`]: not a boundary of the text at all.
    Forced,
    Word,
    Sentence,
    Line,
    /// A line starting a Markdown list item.
    Item,
    /// One or more blank lines.
    Blank,
    /// A Markdown heading; 1 is `#`, 6 is `######`.
    Heading(std::cmp::Reverse<u8>),
}

/// Chunks `text` into `emit`: the loop described in the module comment.
fn cut<'t>(
    text: &'t str,
    markdown: bool,
    (size, overlap): (usize, usize),
    mut count: impl FnMut(&str) -> (usize, u128),
    mut emit: impl FnMut(&'t str, std::collections::vec_deque::Iter<'_, Piece>),
) {
    let size = size.max(1);
    let overlap = overlap.min(size - 1);
    let mut q = Queue::new(text, markdown, size);
    loop {
        q.fill(size, &mut count);
        if q.pieces.is_empty() {
            return;
        }
        let reach = q.reach(size);
        if reach <= q.covered {
            // The overlap leaves no room for anything new: this chunk goes without it.
            q.drop_front(q.covered);
            q.covered = 0;
            continue;
        }
        let end = q.shortened(q.chunk_end(reach), size);
        let chunk = q.text_of(end);
        if !chunk.is_empty() {
            emit(chunk, q.pieces.range(..end));
        }
        if q.done && end == q.pieces.len() {
            return;
        }
        let next = q.next_start(end, overlap);
        q.covered = end - next;
        q.drop_front(next);
    }
}

/// [`cut`]'s state: the pieces read ahead of the chunk being cut, and where the last chunk
/// left them.
struct Queue<'t> {
    text: &'t str,
    source: Pieces<'t>,
    pieces: VecDeque<Piece>,
    /// The tokens of `pieces`.
    queued: usize,
    /// The text has no pieces left.
    done: bool,
    /// Pieces at the queue's front that the last chunk ended with (the overlap): the next
    /// chunk's end is chosen past them, as if it started where the last one ended.
    covered: usize,
}

impl<'t> Queue<'t> {
    fn new(text: &'t str, markdown: bool, size: usize) -> Self {
        Queue {
            text,
            source: Pieces::new(text, markdown, size.clamp(4, MAX_PIECE)),
            pieces: VecDeque::new(),
            queued: 0,
            done: false,
            covered: 0,
        }
    }

    /// Reads pieces until the queue holds more than `size` tokens or the text ends.
    fn fill(&mut self, size: usize, count: &mut impl FnMut(&str) -> (usize, u128)) {
        while self.queued <= size && !self.done {
            match self.source.next() {
                Some((start, end, level)) => {
                    let (tokens, seen) = count(&self.text[start..end]);
                    self.queued += tokens;
                    self.pieces.push_back(Piece {
                        start,
                        end,
                        tokens,
                        level,
                        seen,
                    });
                }
                None => self.done = true,
            }
        }
    }

    /// How many pieces fit in `size` tokens (at least one: a piece is never over the size).
    fn reach(&self, size: usize) -> usize {
        let (mut reach, mut used) = (0, 0);
        while reach < self.pieces.len() && (reach == 0 || used + self.pieces[reach].tokens <= size)
        {
            used += self.pieces[reach].tokens;
            reach += 1;
        }
        reach
    }

    /// Where the chunk ends: everything when the rest of the text fits, else the strongest
    /// boundary past the overlap and in reach, the farthest of those.
    fn chunk_end(&self, reach: usize) -> usize {
        if self.done && reach == self.pieces.len() {
            return reach;
        }
        let mut best = reach;
        for b in (self.covered + 1..reach).rev() {
            if self.pieces[b].level > self.pieces[best].level {
                best = b;
            }
        }
        best
    }

    /// A chunk holding a cut inside a run is counted exactly, and shortened if over.
    fn shortened(&self, mut end: usize, size: usize) -> usize {
        if self
            .pieces
            .range(1..=end.min(self.pieces.len() - 1))
            .any(|p| p.level == Level::Forced)
        {
            let mut shortened = 0;
            while end > self.covered + 1
                && shortened < MAX_SHORTENINGS
                && exact(self.text_of(end)) > size
            {
                end -= 1;
                shortened += 1;
            }
        }
        end
    }

    /// The text of the first `end` pieces, trimmed.
    fn text_of(&self, end: usize) -> &'t str {
        self.text[self.pieces[0].start..self.pieces[end - 1].end].trim()
    }

    /// Where the next chunk starts: within the last `overlap` tokens of this one (and past
    /// its start), at the strongest boundary there, the earliest of those: a sentence's
    /// start rather than a word's when a sentence fits.
    fn next_start(&self, end: usize, overlap: usize) -> usize {
        let (mut earliest, mut shared) = (end, 0);
        while earliest > 1 && shared + self.pieces[earliest - 1].tokens <= overlap {
            shared += self.pieces[earliest - 1].tokens;
            earliest -= 1;
        }
        let mut next = end;
        for b in (earliest..end).rev() {
            if next == end || self.pieces[b].level >= self.pieces[next].level {
                next = b;
            }
        }
        next
    }

    /// Lets go of the first `n` pieces.
    fn drop_front(&mut self, n: usize) {
        for p in self.pieces.drain(..n) {
            self.queued -= p.tokens;
        }
    }
}

/// The text as `(start, end, level)` pieces, in order, covering it.
struct Pieces<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    markdown: bool,
    max: usize,
    /// The last piece was cut inside a run.
    forced: bool,
}

impl<'t> Pieces<'t> {
    fn new(text: &'t str, markdown: bool, max: usize) -> Self {
        Pieces {
            text,
            bytes: text.as_bytes(),
            at: 0,
            markdown,
            max: max.max(4),
            forced: false,
        }
    }

    /// The boundary before a piece starting at `start` with whitespace up to `word`.
    fn level(&self, start: usize, word: usize) -> Level {
        let space = &self.bytes[start..word];
        let newlines = space.iter().filter(|&&b| b == b'\n').count();
        if newlines == 0 {
            return if self.after_sentence(start) {
                Level::Sentence
            } else {
                Level::Word
            };
        }
        if self.markdown {
            // The line the whitespace leads to, from its last line break.
            let line_start = start + space.iter().rposition(|&b| b == b'\n').unwrap_or(0) + 1;
            let line = &self.bytes[line_start..self.bytes.len().min(line_start + 8)];
            let hashes = line.iter().take_while(|&&b| b == b'#').count();
            if (1..=6).contains(&hashes) && line.get(hashes).is_none_or(|&b| b == b' ') {
                return Level::Heading(std::cmp::Reverse(hashes as u8));
            }
            if newlines == 1 && is_item(line) {
                return Level::Item;
            }
        }
        if newlines >= 2 {
            Level::Blank
        } else {
            Level::Line
        }
    }

    /// Whether the text before `at` ends a sentence: `.`, `!` or `?`, then perhaps closing
    /// quotes or brackets.
    fn after_sentence(&self, at: usize) -> bool {
        let before = &self.bytes[..at];
        let closing = before
            .iter()
            .rev()
            .take(8)
            .take_while(|b| matches!(b, b'"' | b'\'' | b')' | b']'))
            .count();
        matches!(
            before[..before.len() - closing].last(),
            Some(b'.' | b'!' | b'?')
        )
    }
}

impl Iterator for Pieces<'_> {
    type Item = (usize, usize, Level);

    fn next(&mut self) -> Option<Self::Item> {
        let (start, len) = (self.at, self.bytes.len());
        if start >= len {
            return None;
        }
        let limit = start.saturating_add(self.max).min(len);
        let mut word = start;
        while word < limit && is_space(self.bytes[word]) {
            word += 1;
        }
        let mut end = word;
        while end < limit && !is_space(self.bytes[end]) {
            end += 1;
        }
        let level = if start == 0 {
            Level::Word
        } else if self.forced {
            Level::Forced
        } else {
            self.level(start, word)
        };
        // Cut at the limit: a boundary only when a word ends there and whitespace follows.
        self.forced = end == limit
            && limit < len
            && (!is_space(self.bytes[limit]) || is_space(self.bytes[limit - 1]));
        if self.forced {
            // Back to a character boundary; one is within 4 bytes, and `max` is at least 4.
            while end > start + 1 && !self.text.is_char_boundary(end) {
                end -= 1;
            }
        }
        self.at = end;
        Some((start, end, level))
    }
}

fn is_space(b: u8) -> bool {
    b.is_ascii_whitespace()
}

/// Whether a line starts a Markdown list item: `-`, `*` or `+` and a space, or digits, `.`
/// or `)` and a space (after any indentation).
fn is_item(line: &[u8]) -> bool {
    let line = &line[line.iter().take_while(|&&b| b == b' ').count()..];
    match line {
        [b'-' | b'*' | b'+', b' ', ..] => true,
        _ => {
            let digits = line.iter().take_while(|b| b.is_ascii_digit()).count();
            digits > 0 && matches!(line.get(digits..digits + 2), Some([b'.' | b')', b' ']))
        }
    }
}

/// Tokens in `text`, as cl100k counts them.
#[cfg(test)]
pub(crate) fn count_tokens(text: &str) -> usize {
    exact(text)
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
        // Cut at sentence ends when a sentence fits, and full: the overlap is not where the
        // next chunk ends.
        assert!(chunks[0].ends_with("book."), "{:?}", chunks[0]);
        for c in &chunks[..chunks.len() - 1] {
            assert!(count_tokens(c) >= 35, "{} tokens: {c}", count_tokens(c));
        }
        // Paragraphs longer than the overlap, with it.
        let para = format!("{}\n\n", sentence.repeat(5));
        let chunks = chunk(Format::Markdown, &para.repeat(40), 400, 50);
        for c in &chunks[..chunks.len() - 1] {
            assert!(count_tokens(c) >= 200, "{} tokens: {c}", count_tokens(c));
        }
    }

    #[test]
    fn a_short_text_is_one_chunk() {
        let chunks = chunk(Format::Text, "  The office opens at nine.  ", 400, 50);
        assert_eq!(chunks, vec!["The office opens at nine."]);
        assert!(chunk(Format::Text, " \n ", 400, 50).is_empty());
        assert!(chunk(Format::Text, "", 400, 50).is_empty());
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
        // In plain text, `#` is no heading: the cut is at the strongest boundary in reach.
        let plain = chunk(Format::Text, &text, 250, 0);
        assert!(plain.iter().all(|c| count_tokens(c) <= 250));
    }

    #[test]
    fn paragraphs_are_kept_whole_when_they_fit() {
        let para = |w: &str| format!("{}\n\n", format!("The {w} runs. ").repeat(12));
        let text: String = ["fox", "hen", "owl", "elk", "yak", "cat"]
            .iter()
            .map(|w| para(w))
            .collect();
        let chunks = chunk(Format::Text, &text, 100, 0);
        for c in &chunks {
            // A chunk never ends inside a paragraph: each paragraph is about 50 tokens.
            assert!(c.ends_with("runs."), "{c:?}");
            let animals = ["fox", "hen", "owl", "elk", "yak", "cat"];
            let n = animals.iter().filter(|a| c.contains(*a)).count();
            assert!((1..=2).contains(&n), "{c:?}");
        }
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
    fn runs_of_whitespace_and_multibyte_text_are_cut_safely() {
        let text = format!(
            "{}é{}ü{}",
            " ".repeat(5000),
            "é".repeat(3000),
            "\n".repeat(700)
        );
        let chunks = chunk(Format::Text, &text, 30, 5);
        assert!(!chunks.is_empty());
        for c in &chunks {
            assert!(count_tokens(c) <= 30, "{} tokens", count_tokens(c));
        }
        assert!(chunks.concat().contains('ü'));
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
    fn pieces_cover_the_text_with_their_boundaries() {
        let text = "One two.  Three\n- item\n\n## Head\nfour\u{e9}";
        let pieces: Vec<(usize, usize, Level)> = Pieces::new(text, true, 64).collect();
        let words: Vec<&str> = pieces.iter().map(|&(s, e, _)| &text[s..e]).collect();
        assert_eq!(words.concat(), text);
        assert_eq!(
            words,
            vec![
                "One",
                " two.",
                "  Three",
                "\n-",
                " item",
                "\n\n##",
                " Head",
                "\nfour\u{e9}"
            ]
        );
        let levels: Vec<Level> = pieces.iter().map(|p| p.2).collect();
        use std::cmp::Reverse;
        assert_eq!(
            levels,
            vec![
                Level::Word,
                Level::Word,
                Level::Sentence,
                Level::Item,
                Level::Word,
                Level::Heading(Reverse(2)),
                Level::Word,
                Level::Line,
            ]
        );
        // A run longer than a piece is cut on character boundaries, as forced cuts.
        let run = "é".repeat(40);
        let pieces: Vec<(usize, usize, Level)> = Pieces::new(&run, false, 7).collect();
        assert_eq!(
            pieces
                .iter()
                .map(|&(s, e, _)| &run[s..e])
                .collect::<String>(),
            run
        );
        assert!(pieces.iter().all(|&(s, e, _)| e - s <= 7));
        assert!(pieces[1..].iter().all(|p| p.2 == Level::Forced));
    }

    #[test]
    fn the_overlap_is_taken_in_whole_words() {
        let line = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
        // One token per word with this count.
        let words = |p: &str| (p.split_whitespace().count(), remember(0, None));
        let run = |overlap| {
            let mut out = Vec::new();
            cut(line, false, (4, overlap), words, |c, _| out.push(c));
            out
        };
        assert_eq!(run(1), vec!["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]);
        assert_eq!(run(0), vec!["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]);
    }

    #[test]
    fn chunking_is_deterministic_and_the_estimate_matches_cl100k() {
        let text = "alpha beta gamma delta. ".repeat(500);
        let a = chunk(Format::Text, &text, 64, 8);
        assert_eq!(a, chunk(Format::Text, &text, 64, 8));
        // Ordinary prose: the sum of the pieces' counts is cl100k's count of the whole, but
        // for punctuation before a line break ("list:\n"), which it counts as two tokens.
        let estimate = |text: &str| {
            let mut counts = Counts::default();
            Pieces::new(text, false, MAX_PIECE)
                .map(|(s, e, _)| counts.count(&text[s..e]).0)
                .sum::<usize>()
        };
        let prose = "The keeper, who was 72, wrote: \"Ships pass at 9:30!\" It's (mostly) true\n\
                     Next line; and a list\n- one\n- two\n\nThe end.";
        assert_eq!(estimate(prose), count_tokens(prose));
        let breaks = "A list:\n- one.\n- two\n";
        assert_eq!(estimate(breaks), count_tokens(breaks) + 2);
    }

    /// Each chunk's terms, built from the pieces' remembered terms, are the analyzer's
    /// terms of the chunk's text: for prose, Markdown, Unicode, long words, runs cut
    /// inside (where a word continues across pieces), and from memory the second time.
    #[test]
    fn a_chunks_terms_are_the_analyzers_terms_of_its_text() {
        let texts = [
            "The Lighthouses' keepers were keeping LOGS of passing ships, generously and \
             happily; running runners ran. "
                .repeat(40),
            "# Tides\n\nÜnïcödé wörds, ΣΊΣΥΦΟΣ ΟΔΟΣ, İstanbul, straße, 12abc 3.14 x86_64 \
             e-mail a.b.c.d.e.f.g.h.i \u{00A0}nbsp\u{3000}ideographic 日本語のテキスト\n\n- item\n"
                .repeat(30),
            format!(
                "intro {} middle {} end",
                "pneumonoultramicroscopicsilicovolcanoconiosis".repeat(5),
                "ab-".repeat(400)
            ),
            "x".repeat(3000),
            "word ".repeat(10) + &"é".repeat(100),
        ];
        for text in &texts {
            for round in 0..2 {
                for (tokens, overlap) in [(400, 50), (30, 5), (7, 2)] {
                    let chunks = chunk_with_terms(Format::Markdown, text, tokens, overlap);
                    assert!(!chunks.is_empty());
                    for (c, terms) in &chunks {
                        let mut want = String::new();
                        terms_into(c, &mut want);
                        assert_eq!(terms, &want, "round {round}, chunk {c:?}");
                    }
                    let texts: Vec<String> = chunks.into_iter().map(|(c, _)| c).collect();
                    assert_eq!(texts, chunk(Format::Markdown, text, tokens, overlap));
                }
            }
        }
    }
}
