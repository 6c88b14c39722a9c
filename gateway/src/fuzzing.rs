//! Byte-level entry points for the cargo-fuzz targets in `fuzz/` (feature `fuzzing`), and
//! the test that replays their committed corpora (see `docs/security.md`, "Fuzzing").
//!
//! Each function runs raw bytes through the code the gateway runs on an operator's or a
//! user's file: the character-file loader and checker, the chunker, and the extraction
//! path of an upload (detect, extract, chunk: what the `troupe extract` worker runs, there
//! under rlimits). Results are thrown away; a panic, a stack overflow, an OOM or a hang is
//! the finding. This is not an API: the real modules stay private.

use std::path::PathBuf;
use std::sync::OnceLock;

use troupe_connectors::Platform;

use crate::knowledge::fuzz::{Format, chunk as chunk_text, detect, extract as extract_text};
use crate::persona::{self, Env, HistoryLine, KnowledgeItem, PromptInput};

/// The chunk size and overlap the gateway uses by default (`TROUPE_KNOWLEDGE_CHUNK_*`).
const DEFAULT_TOKENS: usize = 400;
const DEFAULT_OVERLAP: usize = 50;

/// A character file: written where the loader reads it, checked as `troupe check` does
/// (parse, `extends`, typed fields, cross-file checks), then every loaded persona composes a
/// prompt on each of its platforms.
pub fn character_file(bytes: &[u8]) {
    let path = character_path();
    if std::fs::write(&path, bytes).is_err() {
        return;
    }
    let mut env = Env::new();
    env.insert("TELEGRAM_BOT_TOKEN".into(), "123:abc".into());
    let report = persona::check_files(
        std::slice::from_ref(&path),
        &env,
        &persona::LoadOptions::default(),
    );
    let _ = report.ok();
    for loaded in &report.loaded {
        let p = &loaded.persona;
        let _ = (p.model_provider(), p.model_name(), p.knowledge().len());
        let history = [
            HistoryLine {
                author_name: "Ann",
                text: "hello {{agentName}}",
            },
            HistoryLine {
                author_name: &p.name,
                text: "hi",
            },
        ];
        let knowledge = [KnowledgeItem {
            source: "notes.md",
            text: "The ferry leaves at noon.",
        }];
        for platform in p.platforms().into_iter().chain([Platform::Discord]) {
            let _ = p.switches(platform);
            let _ = p.platform_token(platform, &env);
            let input = PromptInput {
                platform,
                sender_name: "Ann",
                history: &history,
                knowledge: &knowledge,
                seed: bytes.len() as u64,
                budget_chars: 4_000,
                summary: Some("They talked about ferries."),
                facts: &["likes tea"],
            };
            let _ = persona::compose(p, &input);
        }
    }
}

/// One file per process, in a private temporary directory that lives as long as it.
fn character_path() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
        .join("character.json")
}

/// Chunker input: byte 0 picks the format, byte 1 the chunk size in tokens, byte 2 the
/// overlap; the rest is the text (invalid UTF-8 replaced, as text reaches the chunker only
/// after extraction made it UTF-8).
pub fn chunk(bytes: &[u8]) {
    let [f, t, o, rest @ ..] = bytes else {
        return;
    };
    let format = [Format::Text, Format::Markdown, Format::Html, Format::Code][usize::from(*f) % 4];
    let tokens = match t {
        255 => DEFAULT_TOKENS,
        t => usize::from(*t) + 1,
    };
    let overlap = match o {
        255 => DEFAULT_OVERLAP,
        o => usize::from(*o),
    };
    let text = String::from_utf8_lossy(rest);
    let _ = chunk_text(format, &text, tokens, overlap);
}

/// The file names an upload may come with: one per reader, and none to go by.
const NAMES: &[&str] = &[
    "upload",
    "notes.txt",
    "notes.md",
    "page.html",
    "paper.pdf",
    "data.json",
    "events.jsonl",
    "rows.csv",
    "table.tsv",
    "main.rs",
];

/// The content types an upload may declare.
const TYPES: &[Option<&str>] = &[
    None,
    Some("text/plain"),
    Some("text/markdown"),
    Some("text/html"),
    Some("application/pdf"),
    Some("application/json"),
    Some("text/csv"),
    Some("application/octet-stream"),
    Some("image/png"),
];

/// An upload: byte 0 picks the file name, byte 1 the declared content type, the rest is the
/// file. Detected, extracted and chunked with the default sizes, as an ingest does.
pub fn extract(bytes: &[u8]) {
    let [n, t, file @ ..] = bytes else {
        return;
    };
    let name = NAMES[usize::from(*n) % NAMES.len()];
    let declared = TYPES[usize::from(*t) % TYPES.len()];
    let Ok(format) = detect(name, declared, file) else {
        return;
    };
    let Ok(text) = extract_text(format, name, file) else {
        return;
    };
    let _ = chunk_text(format, &text, DEFAULT_TOKENS, DEFAULT_OVERLAP);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The smallest committed corpus files of each target, replayed through `run`: a
    /// corpus entry that panics today fails CI without fuzzing there. Only the smallest
    /// `REPLAYED` are replayed: the chunker and extraction corpora hold thousands of
    /// multi-kilobyte inputs, which take minutes in a debug build; fuzzing itself starts from
    /// the whole corpus (see docs/security.md, "Fuzzing").
    const REPLAYED: usize = 200;

    fn replay(target: &str, run: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("the corpus {} is missing: {e}", dir.display()));
        let mut files: Vec<(u64, std::path::PathBuf)> = entries
            .map(|entry| {
                let entry = entry.expect("a corpus entry");
                let len = entry.metadata().expect("a corpus file's size").len();
                (len, entry.path())
            })
            .collect();
        files.sort();
        assert!(!files.is_empty(), "the corpus {} is empty", dir.display());
        for (_, path) in files.into_iter().take(REPLAYED) {
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            run(&bytes);
        }
    }

    #[test]
    fn character_file_corpus_replays() {
        replay("character_file", super::character_file);
    }

    #[test]
    fn chunker_corpus_replays() {
        replay("chunker", super::chunk);
    }

    #[test]
    fn extract_corpus_replays() {
        replay("extract", super::extract);
    }
}
