//! Chunking: a document's text cut into overlapping pieces of at most N tokens.
//!
//! Sizes are counted in OpenAI's cl100k_base tokens (tiktoken-rs ships the vocabulary in
//! the crate, so nothing is downloaded), because both the prompt budget and the embedding
//! models' input limits are in tokens. Markdown is cut at its own structure (headings,
//! paragraphs, list items) before sentences; everything else at blank lines, lines,
//! sentences, then words, by `text-splitter`.

use std::sync::LazyLock;

use text_splitter::{ChunkConfig, MarkdownSplitter, TextSplitter};
use tiktoken_rs::CoreBPE;

use super::extract::Format;

/// The tokenizer, built once: building it parses a 100k-entry vocabulary.
static CL100K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| tiktoken_rs::cl100k_base().ok());

/// Cuts `text` into chunks of at most `tokens` tokens sharing `overlap` tokens with their
/// neighbours. Empty and whitespace-only pieces are dropped.
pub(crate) fn chunk(format: Format, text: &str, tokens: usize, overlap: usize) -> Vec<String> {
    let tokens = tokens.max(1);
    let overlap = overlap.min(tokens - 1);
    let pieces: Vec<&str> = match CL100K.as_ref() {
        Some(bpe) => split(format, text, config(tokens, overlap).with_sizer(bpe)),
        // Only if the bundled vocabulary failed to load: about four characters per token.
        None => split(format, text, config(tokens * 4, overlap * 4)),
    };
    pieces
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn config(size: usize, overlap: usize) -> ChunkConfig<text_splitter::Characters> {
    ChunkConfig::new(size)
        .with_overlap(overlap)
        .unwrap_or_else(|_| ChunkConfig::new(size))
}

fn split<S: text_splitter::ChunkSizer>(
    format: Format,
    text: &str,
    config: ChunkConfig<S>,
) -> Vec<&str> {
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
    fn chunking_is_deterministic() {
        let text = "alpha beta gamma delta. ".repeat(500);
        assert_eq!(
            chunk(Format::Text, &text, 64, 8),
            chunk(Format::Text, &text, 64, 8)
        );
    }
}
