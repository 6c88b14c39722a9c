//! The docs name what exists (issue 45, item 6): a reader who follows a link or opens a file
//! a guide names finds it.
//!
//! 1. **Links.** Every relative link in `README.md`, `bench/README.md` and `docs/*.md`
//!    (`[text](target)`) points at a file or directory that exists, and a `#fragment` at a
//!    heading of the linked page (GitHub's anchors: lower case, spaces to `-`, punctuation
//!    dropped, `-1`, `-2` … for repeats).
//! 2. **Paths.** Every repository path those pages name, in prose, backquotes or code blocks,
//!    exists. A word is taken for a path when it starts with a top-level entry of the
//!    repository (`gateway/src/agent/`, `docs/console`), which must then exist as written;
//!    or when it ends in a source or document extension (`.rs`, `.md`, `.sql` …), which must
//!    then name a file of the repository, whole or by its last components (`agent/decide.rs`
//!    is `gateway/src/agent/decide.rs`: the guides name a module's file from its crate's
//!    `src/`). URLs, URL paths (`/v1/embeddings`), placeholders (`{base}`, `<target>`, `…`),
//!    home and absolute paths are not the repository's and are skipped.
//! 3. **Source comments name docs that exist.** A `.md` file named in a comment of the
//!    gateway, the connectors, the encoder or the tests exists (two modules once cited a
//!    design document kept outside the repository).
//!
//! Names that are not in the repository on purpose (the operator's `troupe.toml`, the
//! shared fixtures beside the clone) are listed in `NOT_IN_THE_REPOSITORY`, each with why.
//!
//! Run it alone with `cargo test -p troupe-e2e --test e2e docs::`; it needs no build of the
//! gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf()
}

/// Words that look like repository paths but name something outside it, with why.
const NOT_IN_THE_REPOSITORY: &[(&str, &str)] = &[
    ("troupe.toml", "the operator's optional config file"),
    (
        "fixtures/",
        "the shared fixtures live beside the clone (`.ci/run` finds them)",
    ),
    (
        "specs/",
        "the platforms' specs live beside the clone, in shared/",
    ),
    ("docker/.env", "made by `cp .env.example .env`"),
    (".env", "made by `cp .env.example .env`"),
    ("model.safetensors", "a file of the local model's directory"),
    ("config.json", "a file of the local model's directory"),
    ("tokenizer.json", "a file of the local model's directory"),
    ("tokens.json", "an example name of `TROUPE_API_TOKENS_FILE`"),
    (
        "bench/eliza/node_modules",
        "installed by the first `bench/compare.sh`, not committed",
    ),
    ("handbook.md", "the guides' example document"),
    ("huge.png", "the guides' example attachment"),
    ("docs/faq.md", "an example `knowledge` path of a character"),
    (
        "personas/base",
        "an example directory of parent character files",
    ),
    ("personas/ada.json", "an example character file"),
    ("personas/alice.json", "an example character file"),
    ("personas/bob.json", "an example character file"),
    ("personas/carol.json", "an example character file"),
    ("personas/dave.json", "an example character file"),
];

/// Extensions that make a word a file name to check.
const EXTENSIONS: &[&str] = &[
    "rs", "md", "toml", "sql", "sh", "py", "yml", "yaml", "js", "mjs", "css", "html", "png", "dict",
];

/// Directories never walked: build output, git, dependencies.
const SKIPPED_DIRS: &[&str] = &["target", ".git", "node_modules"];

/// Every file and directory of the repository, relative to its root, with `/` separators.
fn repository_entries() -> BTreeSet<String> {
    let root = repo();
    let mut out = BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a directory of the repository") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() && SKIPPED_DIRS.contains(&name.as_str()) {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().to_string_lossy();
            out.insert(rel.replace('\\', "/"));
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// The pages checked: README.md, bench/README.md and docs/*.md, relative to the root.
fn pages() -> Vec<String> {
    let mut out = vec!["README.md".to_string(), "bench/README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of a page, numbered from 1, each marked whether it sits in a fenced code block
/// (the fences themselves are left out).
fn lines_of(text: &str) -> Vec<(usize, bool, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        out.push((n + 1, fenced, line));
    }
    out
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, fenced, line) in lines_of(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let base = slug(heading.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the Markdown links on a line: `[text](target)`.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    out
}

/// A repository path a word names, when it names one: the word without surrounding
/// punctuation and without a `#fragment` or a `:line` suffix.
fn path_word(word: &str, top_level: &BTreeSet<String>) -> Option<String> {
    let word = word.trim_matches(|c: char| ".,;:!?'\"".contains(c));
    let word = word.split('#').next().unwrap_or_default();
    let word = word.split(':').next().unwrap_or_default();
    let skipped = ["{", "}", "$", "…", "*", "<", ">", "=", "@", "%", "\\"];
    if word.is_empty()
        || word.starts_with(['/', '~', '-', '.'])
        || skipped.iter().any(|s| word.contains(s))
        || !word.chars().any(|c| c.is_ascii_alphabetic())
    {
        return None;
    }
    let first = word.split('/').next().unwrap_or_default();
    let rooted = word.contains('/') && top_level.contains(first);
    let file = word
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
    (rooted || file).then(|| word.trim_end_matches('/').to_string())
}

/// Whether a path word names something of the repository.
fn exists(word: &str, top_level: &BTreeSet<String>, entries: &BTreeSet<String>) -> bool {
    let first = word.split('/').next().unwrap_or_default();
    if word.contains('/') && top_level.contains(first) {
        return entries.contains(word);
    }
    let suffix = format!("/{word}");
    entries.contains(word) || entries.iter().any(|e| e.ends_with(&suffix))
}

fn not_in_the_repository(word: &str) -> bool {
    NOT_IN_THE_REPOSITORY
        .iter()
        .any(|(name, _)| word == *name || (name.ends_with('/') && word.starts_with(name)))
}

/// The words of a line that could be paths: split at white space and at the marks that
/// surround a path in Markdown.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| c.is_whitespace() || "`()[]|,;\"'".contains(c))
        .filter(|w| !w.is_empty())
}

/// What is wrong with the links and paths of one page.
fn problems_of(
    page: &str,
    entries: &BTreeSet<String>,
    top_level: &BTreeSet<String>,
) -> Vec<String> {
    let text = read(page);
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for (n, fenced, line) in lines_of(&text) {
        let at = format!("{page}:{n}");
        if !fenced {
            for target in links(line) {
                if let Some(problem) = link_problem(&text, dir, &target) {
                    out.push(format!("{at}: link `{target}`: {problem}"));
                }
            }
        }
        for word in words(line) {
            if word.contains("://") || word.starts_with("mailto:") {
                continue;
            }
            let Some(path) = path_word(word, top_level) else {
                continue;
            };
            if !not_in_the_repository(&path) && !exists(&path, top_level, entries) {
                out.push(format!(
                    "{at}: names `{path}`, which the repository does not hold"
                ));
            }
        }
    }
    out
}

/// Why a link's target does not resolve, if it does not.
fn link_problem(text: &str, dir: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    let page = if file.is_empty() {
        text.to_string()
    } else {
        let path = normalise(&dir.join(file));
        let full = repo().join(&path);
        if !full.exists() {
            return Some(format!("{} does not exist", path.display()));
        }
        match (fragment, full.extension().is_some_and(|e| e == "md")) {
            (Some(_), true) => std::fs::read_to_string(&full).ok()?,
            _ => return None,
        }
    };
    let fragment = fragment?;
    (!anchors(&page).contains(fragment)).then(|| format!("no heading has the anchor #{fragment}"))
}

/// A path with its `.` and `..` steps taken (a link from `docs/` up to the README).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn top_level(entries: &BTreeSet<String>) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| !e.contains('/'))
        .cloned()
        .collect()
}

#[test]
fn every_link_and_path_in_the_docs_exists() {
    let entries = repository_entries();
    let top = top_level(&entries);
    let problems: Vec<String> = pages()
        .iter()
        .flat_map(|page| problems_of(page, &entries, &top))
        .collect();
    assert!(
        problems.is_empty(),
        "{} link(s) or path(s) in the docs lead nowhere:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Every `//` comment line of the Rust sources under `dir`.
fn comment_lines(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            comment_lines(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(repo()).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).expect("a source file");
            for (n, line) in text.lines().enumerate() {
                if let Some(at) = line.find("//") {
                    out.push((format!("{rel}:{}", n + 1), line[at..].to_string()));
                }
            }
        }
    }
}

#[test]
fn source_comments_name_docs_that_exist() {
    let entries = repository_entries();
    let top = top_level(&entries);
    let mut lines = Vec::new();
    for dir in [
        "gateway/src",
        "gateway/tests",
        "connectors/src",
        "encoder/src",
        "tests/src",
        "tests/tests",
    ] {
        comment_lines(&repo().join(dir), &mut lines);
    }
    let mut problems = Vec::new();
    for (at, comment) in &lines {
        for word in words(comment) {
            let Some(path) = path_word(word, &top) else {
                continue;
            };
            if path.ends_with(".md")
                && !not_in_the_repository(&path)
                && !exists(&path, &top, &entries)
            {
                problems.push(format!(
                    "{at}: names `{path}`, which the repository does not hold"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} comment(s) cite a document the repository does not hold:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_checker_reads_links_paths_and_anchors() {
    assert_eq!(
        slug(" `troupe check` and the API: 2.x "),
        "troupe-check-and-the-api-2x"
    );
    assert_eq!(
        links("see [a](docs/a.md#b) and [c](c.md)."),
        ["docs/a.md#b", "c.md"]
    );
    let top: BTreeSet<String> = ["gateway", "docs"].iter().map(|s| s.to_string()).collect();
    assert_eq!(
        path_word("gateway/src/x.rs,", &top).as_deref(),
        Some("gateway/src/x.rs")
    );
    assert_eq!(
        path_word("agent/decide.rs:12", &top).as_deref(),
        Some("agent/decide.rs")
    );
    assert_eq!(path_word("/v1/embeddings", &top), None);
    assert_eq!(path_word("text/event-stream", &top), None);
    assert_eq!(path_word("{base}/audio/x.rs", &top), None);
    let entries: BTreeSet<String> = [
        "gateway",
        "gateway/src",
        "gateway/src/agent",
        "gateway/src/agent/decide.rs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert!(exists("agent/decide.rs", &top, &entries));
    assert!(exists("decide.rs", &top, &entries));
    assert!(!exists("gateway/agent/decide.rs", &top, &entries));
    assert!(!exists("gent/decide.rs", &top, &entries));
    let page = "# Title\n## A `b` c\n## A `b` c\n```\n# not a heading\n```\n";
    let found = anchors(page);
    assert!(
        found.contains("a-b-c") && found.contains("a-b-c-1"),
        "{found:?}"
    );
    assert!(!found.contains("not-a-heading"));
}
