//! The keyword index's analyzer: chunk text and queries into stemmed English terms.
//!
//! It gives exactly the tokens of tantivy's stock `en_stem` chain (`SimpleTokenizer`, then
//! `RemoveLongFilter::limit(40)`, `LowerCaser` and the English Snowball `Stemmer`): words are
//! runs of alphanumeric characters, words of 40 bytes or more are dropped, the rest are
//! lower-cased and stemmed, so "Lighthouses" matches "lighthouse". A test holds it to the
//! stock chain: the index holds the terms tantivy's own analyzer would give, and BM25 ranks
//! as it would.
//!
//! It is one pass instead of four, with the stem taken from memory ([`Stems`]) rather than
//! from Snowball; the memory is one per process, not per thread. Chunk text reaches the
//! index as its *terms* ([`terms_into`]: each token followed by a space), computed by the
//! writer's caller, and the index's own tokenizer ([`Terms`]) only splits them: analyzing
//! on tantivy's single indexing thread bound ingest speed (issue 14). A chunk read in this
//! process gets its terms from the chunker's memory instead (`chunk`), which runs this
//! analyzer once per distinct piece of text.

use std::sync::{LazyLock, Mutex, MutexGuard, TryLockError};

use rustc_hash::FxHashMap;
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

use super::memo::{Hot, packed};

/// Words of this many bytes or more are not indexed (tantivy's `RemoveLongFilter` limit).
const MAX_WORD_BYTES: usize = 40;
/// Distinct words of at most 15 bytes whose stems are remembered; past it the memory
/// starts again (32 bytes each: about 3 MB).
const MAX_STEMS: usize = 100_000;
/// The same for longer words (up to 39 bytes, kept as strings): rare in text, and what a
/// hostile upload of made-up words would fill, so fewer (about 1 MB).
const MAX_LONG_STEMS: usize = 10_000;

/// The process's stem memory. A token stream holds it while it runs (one chunk or one
/// query, microseconds); a stream that finds it held stems without it rather than wait.
static STEMS: LazyLock<Mutex<Stems>> = LazyLock::new(|| Mutex::new(Stems::default()));

/// The analyzer: words, lower-cased, long ones dropped, stemmed (see the module comment).
#[derive(Clone, Default)]
pub(super) struct EnStem {
    token: Token,
}

impl Tokenizer for EnStem {
    type TokenStream<'a> = EnStemStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> EnStemStream<'a> {
        self.token.reset();
        EnStemStream {
            text,
            at: 0,
            token: &mut self.token,
            stems: match STEMS.try_lock() {
                Ok(stems) => Some(stems),
                // Stemming leaves the memory whole at every step; a panic elsewhere while
                // it was held does not make it wrong.
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            },
        }
    }
}

pub(super) struct EnStemStream<'a> {
    text: &'a str,
    /// Where the scan resumes: the end of the last word.
    at: usize,
    token: &'a mut Token,
    /// `None` when another stream holds the memory: stems are then computed.
    stems: Option<MutexGuard<'static, Stems>>,
}

impl EnStemStream<'_> {
    /// The next run of alphanumeric characters at or after `at`: `(start, end, ascii)`.
    fn next_word(&self, mut at: usize) -> Option<(usize, usize, bool)> {
        let bytes = self.text.as_bytes();
        let start = loop {
            let &b = bytes.get(at)?;
            if b.is_ascii() {
                if b.is_ascii_alphanumeric() {
                    break at;
                }
                at += 1;
            } else {
                let c = self.text[at..].chars().next()?;
                if c.is_alphanumeric() {
                    break at;
                }
                at += c.len_utf8();
            }
        };
        let (mut end, mut ascii) = (start, true);
        while let Some(&b) = bytes.get(end) {
            if b.is_ascii() {
                if !b.is_ascii_alphanumeric() {
                    break;
                }
                end += 1;
            } else {
                match self.text[end..].chars().next() {
                    Some(c) if c.is_alphanumeric() => {
                        ascii = false;
                        end += c.len_utf8();
                    }
                    _ => break,
                }
            }
        }
        Some((start, end, ascii))
    }
}

impl TokenStream for EnStemStream<'_> {
    fn advance(&mut self) -> bool {
        while let Some((start, end, ascii)) = self.next_word(self.at) {
            self.at = end;
            // Positions count every word, dropped ones too, as the stock chain's do.
            self.token.position = self.token.position.wrapping_add(1);
            if end - start >= MAX_WORD_BYTES {
                continue;
            }
            let word = &self.text[start..end];
            self.token.offset_from = start;
            self.token.offset_to = end;
            let text = &mut self.token.text;
            text.clear();
            if ascii {
                text.push_str(word);
                text.make_ascii_lowercase();
            } else {
                // Character by character, as tantivy's `LowerCaser` does (not
                // `str::to_lowercase`, whose final sigma differs).
                text.extend(word.chars().flat_map(char::to_lowercase));
            }
            match self.stems.as_deref_mut() {
                Some(stems) => stems.stem(text),
                None => *text = snowball(text),
            }
            return true;
        }
        false
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// `text`'s terms (the tokens of [`EnStem`]), each followed by one space, appended to
/// `out`: the form in which chunk text reaches the index (see [`Terms`]). Stems hold no
/// space (they are runs of alphanumeric characters), so the form splits back exactly.
pub(super) fn terms_into(text: &str, out: &mut String) {
    let mut analyzer = EnStem::default();
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        out.push_str(&stream.token().text);
        out.push(' ');
    }
}

/// [`terms_into`] a new string.
pub(super) fn terms(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    terms_into(text, &mut out);
    out
}

/// The index-time tokenizer of chunk text: the text arrives as its terms, already
/// analyzed off tantivy's indexing thread ([`terms_into`]), and is only split at spaces.
/// Analyzing on the indexing thread made that one thread the bound of ingest speed
/// (issue 14); the writer's callers run on other cores.
#[derive(Clone, Default)]
pub(super) struct Terms {
    token: Token,
}

impl Tokenizer for Terms {
    type TokenStream<'a> = TermsStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> TermsStream<'a> {
        self.token.reset();
        TermsStream {
            rest: text,
            at: 0,
            token: &mut self.token,
        }
    }
}

pub(super) struct TermsStream<'a> {
    rest: &'a str,
    /// The offset of `rest` in the text.
    at: usize,
    token: &'a mut Token,
}

impl TokenStream for TermsStream<'_> {
    fn advance(&mut self) -> bool {
        loop {
            if self.rest.is_empty() {
                return false;
            }
            let (term, rest, skip) = match memchr::memchr(b' ', self.rest.as_bytes()) {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..], i + 1),
                None => (self.rest, "", self.rest.len()),
            };
            let start = self.at;
            self.rest = rest;
            self.at += skip;
            if term.is_empty() {
                continue;
            }
            self.token.position = self.token.position.wrapping_add(1);
            self.token.offset_from = start;
            self.token.offset_to = start + term.len();
            self.token.text.clear();
            self.token.text.push_str(term);
            return true;
        }
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// Stems remembered per word: a [`Hot`] table in front of the full memory. A word of at
/// most 15 bytes (nearly all) and its stem are packed in `u128`s; longer words are kept as
/// strings.
#[derive(Default)]
struct Stems {
    hot: Hot<u128>,
    short: FxHashMap<u128, u128>,
    long: FxHashMap<Box<str>, Box<str>>,
}

impl Stems {
    /// Replaces `word` (lower-cased) by its stem.
    fn stem(&mut self, word: &mut String) {
        if let Some(key) = packed(word.as_bytes()) {
            let packed = match self.hot.get(key) {
                Some(stem) => stem,
                None => {
                    let stem = match self.short.get(&key) {
                        Some(&stem) => stem,
                        None => {
                            let stem = snowball(word);
                            // Snowball English never lengthens a word; should it, that stem
                            // is not remembered.
                            let Some(packed) = packed(stem.as_bytes()) else {
                                *word = stem;
                                return;
                            };
                            if self.short.len() >= MAX_STEMS {
                                self.short.clear();
                            }
                            self.short.insert(key, packed);
                            packed
                        }
                    };
                    self.hot.put(key, stem);
                    stem
                }
            };
            if packed != key {
                let bytes = packed.to_le_bytes();
                let len = usize::from(bytes[15]);
                // Packed from a `str`: whole characters, valid UTF-8.
                if let Ok(stem) = std::str::from_utf8(&bytes[..len]) {
                    word.clear();
                    word.push_str(stem);
                }
            }
            return;
        }
        if let Some(stem) = self.long.get(word.as_str()) {
            if **stem != **word {
                word.clear();
                word.push_str(stem);
            }
            return;
        }
        let stem = snowball(word);
        if self.long.len() >= MAX_LONG_STEMS {
            self.long.clear();
        }
        self.long.insert(word.as_str().into(), stem.as_str().into());
        *word = stem;
    }
}

/// Snowball's English stem of a lower-cased word: the implementation tantivy's own
/// `Stemmer` runs.
fn snowball(word: &str) -> String {
    frostem::Stemmer::new(frostem::Algorithm::English)
        .stem(word)
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::tokenizer::TextAnalyzer;

    const TEXT: &str = "The Lighthouses' keepers were keeping LOGS of passing ships, generously \
        and happily; running runners ran. Lighthouses again: keepers, keeping, ships. \
        Ünïcödé wörds, ΣΊΣΥΦΟΣ ΟΔΟΣ, İstanbul, straße, 12abc 3.14 x86_64 e-mail \
        internationalization's institutionalizations, and \
        pneumonoultramicroscopicsilicovolcanoconiosisandthensome, \
        thirtyninecharacterswordforthelimitxyz thirtyeightcharacterswordforthelimitxy \
        — «quoted» 日本語のテキスト done";

    fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut out = Vec::new();
        let mut stream = analyzer.token_stream(text);
        while let Some(t) = stream.next() {
            out.push((t.text.clone(), t.position, t.offset_from, t.offset_to));
        }
        out
    }

    fn stock() -> TextAnalyzer {
        tantivy::tokenizer::TokenizerManager::default()
            .get("en_stem")
            .unwrap()
    }

    /// The same tokens as tantivy's stock `en_stem` (text, position, offsets), the first
    /// time a word is seen and from memory, and without the memory.
    #[test]
    fn the_analyzer_gives_the_stock_tokens() {
        let mut ours = TextAnalyzer::from(EnStem::default());
        let expected = tokens(&mut stock(), TEXT);
        assert!(expected.iter().any(|(t, ..)| t == "lighthous"));
        assert_eq!(tokens(&mut ours, TEXT), expected);
        // Second time round, every stem comes from memory.
        assert_eq!(tokens(&mut ours, TEXT), expected);
        // With the memory held elsewhere, Snowball runs directly.
        let held = STEMS.lock().unwrap();
        assert_eq!(tokens(&mut ours, TEXT), expected);
        drop(held);
        for text in ["", "   ", "!!", "a", "é", "ab\u{0301}c", "x\u{10FFFF}y"] {
            assert_eq!(
                tokens(&mut ours, text),
                tokens(&mut stock(), text),
                "{text:?}"
            );
        }
    }

    /// Chunk text reaches the index as its terms; split back, they are the analyzer's
    /// tokens, in order, so the index counts the same terms (and the same length, for BM25).
    #[test]
    fn terms_split_back_into_the_analyzer_tokens() {
        for text in [TEXT, "", "  ", "a b", "!!", "x\u{10FFFF}y"] {
            let mut form = String::new();
            terms_into(text, &mut form);
            let mut split = TextAnalyzer::from(Terms::default());
            let got: Vec<String> = tokens(&mut split, &form).into_iter().map(|t| t.0).collect();
            let want: Vec<String> = tokens(&mut stock(), text)
                .into_iter()
                .map(|t| t.0)
                .collect();
            assert_eq!(got, want, "{text:?}");
        }
    }

    /// A stream of made-up words (a hostile upload) cannot grow the stem memory past its
    /// bounds, and stems stay right across a reset.
    #[test]
    fn the_stem_memory_is_bounded() {
        let mut stems = Stems::default();
        for i in 0..MAX_LONG_STEMS + 10 {
            let mut word = format!("madeupwordnumber{i:08}s");
            stems.stem(&mut word);
            assert!(!word.ends_with('s'), "{word}");
        }
        assert!(stems.long.len() <= MAX_LONG_STEMS);
        for i in 0..MAX_STEMS + 10 {
            stems.stem(&mut format!("w{i}"));
        }
        assert!(stems.short.len() <= MAX_STEMS);
        for _ in 0..2 {
            let mut word = "lighthouses".to_string();
            stems.stem(&mut word);
            assert_eq!(word, "lighthous");
        }
    }
}
