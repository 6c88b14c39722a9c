//! The settings the code reads are the settings README.md lists (issue 45, item 3), both
//! ways:
//!
//! 1. every setting the gateway or the connectors read is a row of README.md's settings
//!    tables (under "## Configuration"), and
//! 2. every name in a row of those tables is read somewhere in that code.
//!
//! "Read" means: written whole, as a string literal, in the non-test code of
//! `gateway/src` or `connectors/src` (comments and `#[cfg(test)] mod tests` left out), and
//! looking like a setting (`UPPER_SNAKE`, with an underscore). The files of
//! `NOT_SETTINGS_FILES` are left out, each with why; among them the declaration itself,
//! `gateway/src/config/table.rs`, which names every setting, read or not. The README's
//! tables are generated from that declaration (`config::table::tests` checks them), so a
//! failure here is fixed there, and its module doc says how.
//!
//! Run it alone with `cargo test -p troupe-e2e --test e2e settings::`; it needs no build of the
//! gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf()
}

/// UPPER_SNAKE string literals of the code that are not settings, with why.
const NOT_SETTINGS: &[(&str, &str)] =
    &[("CARGO_PKG_VERSION", "cargo's, read by `env!` at build time")];

/// Source files whose setting-like literals are not settings troupe reads, with why.
const NOT_SETTINGS_FILES: &[(&str, &str)] = &[
    (
        "gateway/src/config/table.rs",
        "the declaration: it names every setting, read or not",
    ),
    (
        "gateway/src/tools/floor.rs",
        "the floor under `TROUPE_MCP_ENV` (issue 43): other programs' variables, refused, never read",
    ),
];

/// Source files whose literals are not reads: those above, and test code.
fn skipped(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    NOT_SETTINGS_FILES.iter().any(|(file, _)| *file == rel)
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || ["test_support.rs", "fuzzing.rs", "conformance.rs"].contains(&name)
}

/// Whether a string literal looks like a setting's name.
fn looks_like_a_setting(s: &str) -> bool {
    s.contains('_')
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The string literals of a source text's code, each with its line: comments and the
/// `#[cfg(test)] mod tests` at the end are left out. A small scanner, not a Rust parser:
/// enough for settings' names, which hold no quote.
fn literals(text: &str) -> Vec<(usize, String)> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        // A quote as a character literal would look like the start of a string.
        let line = line.replace(r#"'"'"#, "'_'").replace(r#"'\"'"#, "'_'");
        let mut rest = line.as_str();
        loop {
            let quote = rest.find('"');
            let comment = rest.find("//");
            let Some(open) = quote.filter(|q| comment.is_none_or(|c| *q < c)) else {
                break;
            };
            let after = &rest[open + 1..];
            let Some(close) = after.find('"') else { break };
            out.push((n + 1, after[..close].to_string()));
            rest = &after[close + 1..];
        }
    }
    out
}

/// Every setting-like literal of the gateway's and the connectors' code, with the first
/// place it is read.
fn read_in_code() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![repo().join("gateway/src"), repo().join("connectors/src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(repo()).unwrap().display().to_string();
            if !rel.ends_with(".rs") || skipped(&rel) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            for (line, lit) in literals(&text) {
                if looks_like_a_setting(&lit) {
                    out.entry(lit).or_insert_with(|| format!("{rel}:{line}"));
                }
            }
        }
    }
    out
}

/// The names in the first column of the tables of README.md's "## Configuration" section.
fn documented(readme: &str) -> BTreeSet<String> {
    let section = readme
        .split("\n## Configuration\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README.md has a Configuration section");
    let mut out = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let first = row.split('|').nth(1).unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            if looks_like_a_setting(name) {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// What is wrong, both ways, between the settings the code reads and those documented.
fn problems(read: &BTreeMap<String, String>, documented: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, at) in read {
        if !documented.contains(name) && !NOT_SETTINGS.iter().any(|(n, _)| n == name) {
            out.push(format!(
                "{name} is read ({at}) but has no row in README.md's settings tables"
            ));
        }
    }
    for name in documented {
        if !read.contains_key(name) {
            out.push(format!(
                "{name} has a row in README.md's settings tables but no code reads it"
            ));
        }
    }
    out
}

#[test]
fn the_settings_read_are_the_settings_listed() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let found = problems(&read_in_code(), &documented(&readme));
    assert!(
        found.is_empty(),
        "{} setting(s) differ between the code and README.md:\n  {}\n\
         Declare each in gateway/src/config/table.rs (or remove it there), then run \
         `UPDATE_DOCS=1 cargo test -p troupe --lib config::table` to rewrite README.md.",
        found.len(),
        found.join("\n  ")
    );
}

#[test]
fn the_check_fails_both_ways() {
    let text = "let a = \"TROUPE_A\"; // \"TROUPE_B\"\nf('\"', \"OTHER_C\", \"x\");\n\
                #[cfg(test)]\nmod tests { \"TROUPE_D\" }\n";
    let lits: Vec<String> = literals(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(lits, ["TROUPE_A", "OTHER_C", "x"]);
    assert!(looks_like_a_setting("TROUPE_A"));
    assert!(!looks_like_a_setting("TROUPE_") && !looks_like_a_setting("Ab_C"));
    let readme = "# t\n## Configuration\n\n| variable | meaning |\n|---|---|\n\
                  | `TROUPE_A` / `RUST_LOG` | a |\n| `TROUPE_Z` | z |\n## Next\n| `TROUPE_Q` | |\n";
    let documented = documented(readme);
    assert_eq!(
        documented.iter().collect::<Vec<_>>(),
        ["RUST_LOG", "TROUPE_A", "TROUPE_Z"]
    );
    let read: BTreeMap<String, String> = [
        ("TROUPE_A", "a.rs:1"),
        ("RUST_LOG", "b.rs:2"),
        ("OTHER_C", "c.rs:3"),
    ]
    .into_iter()
    .map(|(n, at)| (n.to_string(), at.to_string()))
    .collect();
    let found = problems(&read, &documented);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("OTHER_C is read (c.rs:3)"),
        "{found:?}"
    );
    assert!(found[1].starts_with("TROUPE_Z has a row"), "{found:?}");
}
