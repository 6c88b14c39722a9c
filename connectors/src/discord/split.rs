//! Splitting a reply at Discord's 2,000 characters without breaking Markdown code blocks.
//!
//! The text is read as prose and fenced code blocks (```` ```lang ```` … ```` ``` ````). Blocks
//! are packed into messages whole when they fit; prose that does not fit is split by
//! [`crate::split::split_text`] (paragraph, line, sentence, word). A code block longer than
//! one message is the only thing ever cut inside a fence: it is cut between lines, and each
//! piece is closed with ```` ``` ```` and reopened with the same opening fence (language
//! included) in the next message, so every message renders as valid Markdown.

use crate::split::{chars, split_text};

const FENCE: &str = "```";

#[derive(Debug, PartialEq, Eq)]
enum Block {
    Prose(String),
    /// `open` is the opening fence line (```` ```rust ````), `body` the lines inside.
    Code {
        open: String,
        body: Vec<String>,
    },
}

impl Block {
    fn render(&self) -> String {
        match self {
            Block::Prose(text) => text.clone(),
            Block::Code { open, body } => wrap(open, &body.join("\n")),
        }
    }
}

fn wrap(open: &str, body: &str) -> String {
    if body.is_empty() {
        format!("{open}\n{FENCE}")
    } else {
        format!("{open}\n{body}\n{FENCE}")
    }
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut prose: Vec<&str> = Vec::new();
    let mut code: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        match &mut code {
            Some((_, body)) => {
                if line.trim_start().starts_with(FENCE) && line.trim() == FENCE {
                    if let Some((open, body)) = code.take() {
                        out.push(Block::Code { open, body });
                    }
                } else {
                    body.push(line.to_string());
                }
            }
            None => {
                if line.trim_start().starts_with(FENCE) {
                    let text = prose.join("\n");
                    if !text.trim().is_empty() {
                        out.push(Block::Prose(text.trim_matches('\n').to_string()));
                    }
                    prose.clear();
                    code = Some((line.trim().to_string(), Vec::new()));
                } else {
                    prose.push(line);
                }
            }
        }
    }
    // An unclosed fence runs to the end; it is closed in the output.
    if let Some((open, body)) = code {
        out.push(Block::Code { open, body });
    }
    let text = prose.join("\n");
    if !text.trim().is_empty() {
        out.push(Block::Prose(text.trim_matches('\n').to_string()));
    }
    out
}

/// Cuts code lines into pieces whose wrapped form fits `limit`.
fn code_pieces(open: &str, body: &[String], limit: usize) -> Vec<String> {
    // The fences and their newlines.
    let overhead = chars(open) + 1 + 1 + FENCE.len();
    let budget = limit.saturating_sub(overhead).max(1);
    let mut lines: Vec<String> = Vec::new();
    for line in body {
        if chars(line) <= budget {
            lines.push(line.clone());
        } else {
            // A line longer than a message: hard cuts at character boundaries.
            let all: Vec<char> = line.chars().collect();
            lines.extend(all.chunks(budget).map(|c| c.iter().collect()));
        }
    }
    let mut pieces = Vec::new();
    let mut current = String::new();
    for line in lines {
        let grown = if current.is_empty() {
            chars(&line)
        } else {
            chars(&current) + 1 + chars(&line)
        };
        if grown > budget && !current.is_empty() {
            pieces.push(wrap(open, &current));
            current.clear();
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(&line);
    }
    if !current.is_empty() || pieces.is_empty() {
        pieces.push(wrap(open, &current));
    }
    pieces
}

/// Splits `text` into messages of at most `limit` characters.
pub(crate) fn split_message(text: &str, limit: usize) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    if chars(text) <= limit && text.matches(FENCE).count().is_multiple_of(2) {
        return vec![text.to_string()];
    }
    let mut chunks = Vec::new();
    let mut current = String::new();
    let flush = |current: &mut String, chunks: &mut Vec<String>| {
        if !current.trim().is_empty() {
            chunks.push(std::mem::take(current));
        }
        current.clear();
    };
    for block in blocks(text) {
        let rendered = block.render();
        let joined = if current.is_empty() {
            chars(&rendered)
        } else {
            chars(&current) + 1 + chars(&rendered)
        };
        if joined <= limit {
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(&rendered);
            continue;
        }
        flush(&mut current, &mut chunks);
        if chars(&rendered) <= limit {
            current = rendered;
            continue;
        }
        let mut pieces = match &block {
            Block::Prose(prose) => split_text(prose, limit, chars),
            Block::Code { open, body } => code_pieces(open, body, limit),
        };
        // The last piece may share its message with what follows.
        if let Some(last) = pieces.pop() {
            chunks.extend(pieces);
            current = last;
        }
    }
    flush(&mut current, &mut chunks);
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fences_balanced(chunk: &str) -> bool {
        chunk
            .lines()
            .filter(|l| l.trim_start().starts_with(FENCE))
            .count()
            .is_multiple_of(2)
    }

    #[test]
    fn short_text_is_one_message() {
        assert_eq!(split_message("hi", 2000), vec!["hi"]);
        assert!(split_message(" \n ", 2000).is_empty());
        assert_eq!(
            split_message("```\nunclosed", 2000),
            vec!["```\nunclosed\n```"]
        );
    }

    #[test]
    fn forty_five_hundred_characters_make_three_messages_and_keep_the_code_whole() {
        let prose = "The tide comes in twice a day, and goes out again. ".repeat(30); // 1530
        let code_lines: Vec<String> = (0..40)
            .map(|i| format!("    let wave_{i:02} = tide.height() * {i};  // ok"))
            .collect(); // 40 lines of about 42
        let code = format!("```rust\n{}\n```", code_lines.join("\n"));
        let tail = "Sand shifts with every storm that passes over. ".repeat(24);
        let text = format!("{}\n\n{code}\n\n{}", prose.trim(), tail.trim());
        assert!((4400..=4600).contains(&chars(&text)), "{}", chars(&text));

        let chunks = split_message(&text, 2000);
        assert_eq!(chunks.len(), 3, "{chunks:#?}");
        assert!(chunks.iter().all(|c| chars(c) <= 2000));
        assert!(chunks.iter().all(|c| fences_balanced(c)), "{chunks:#?}");
        // The code block is in one message, intact.
        assert_eq!(chunks.iter().filter(|c| c.contains(&code)).count(), 1);
        // Nothing is lost.
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(words(&chunks.join("\n")), words(&text));
    }

    #[test]
    fn a_code_block_longer_than_a_message_is_closed_and_reopened() {
        let lines: Vec<String> = (0..120)
            .map(|i| format!("print({i:03}) # {}", "x".repeat(30)))
            .collect();
        let text = format!("Here:\n```python\n{}\n```\nDone.", lines.join("\n"));
        let chunks = split_message(&text, 2000);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert!(chars(c) <= 2000);
            assert!(fences_balanced(c), "{c}");
        }
        assert!(chunks[1].starts_with("```python\n"));
        // Every line arrives once, in order.
        let got: Vec<&str> = chunks
            .iter()
            .flat_map(|c| c.lines())
            .filter(|l| l.starts_with("print("))
            .collect();
        assert_eq!(got, lines.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn a_huge_line_in_code_is_cut_but_fenced() {
        let text = format!("```\n{}\n```", "y".repeat(5000));
        let chunks = split_message(&text, 2000);
        assert!(
            chunks
                .iter()
                .all(|c| chars(c) <= 2000 && fences_balanced(c))
        );
        let ys: usize = chunks.iter().map(|c| c.matches('y').count()).sum();
        assert_eq!(ys, 5000);
    }
}
