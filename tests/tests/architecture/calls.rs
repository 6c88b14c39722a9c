//! 6. **One provider entry point** (issue 45): the model is reached one way.
//!
//! - The `ModelProvider` trait (`gateway/src/provider/mod.rs`) has one method that calls a
//!   model: one `async fn` (`send`, which takes a `Sealed` only `provider/call.rs` can make,
//!   so every caller goes through `call`). Replies, tool steps, vision, transcription,
//!   speech, summaries, facts and posts differ in their `Request`, not in the method.
//! - A model call is metered in one place, where it is made: outside `gateway/src/provider/`
//!   no production code records a call in the spend ledger (a `.record(` whose arguments
//!   name a purpose). Embeddings (`knowledge/`) are not calls of a persona's model provider
//!   and record their own.
//!
//! Read from the same stripped source as the other rules (comments, strings and
//! `#[cfg(test)]` modules gone).

use super::{block_end, repo, rust_files, strip_comments_and_strings, strip_test_modules};

/// Where the spend ledger may be told of a call, with why.
const LEDGER_WRITERS: &[(&str, &str)] = &[
    (
        "gateway/src/provider/",
        "`provider::call` meters every model call",
    ),
    (
        "gateway/src/knowledge/",
        "embeddings: the embedder is not a model provider",
    ),
];

fn stripped(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).expect("a readable source file");
    strip_test_modules(&strip_comments_and_strings(&text))
}

/// The body of `trait ModelProvider`, from its opening brace to the closing one.
fn provider_trait(code: &str) -> &str {
    let at = code
        .find("trait ModelProvider")
        .expect("provider/mod.rs declares `trait ModelProvider`");
    let open = at + code[at..].find('{').expect("the trait has a body");
    &code[open..block_end(code, open)]
}

/// The names of the `async fn`s a block declares.
fn async_methods(block: &str) -> Vec<String> {
    block
        .match_indices("async fn ")
        .map(|(at, m)| {
            block[at + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Each `.record(…)` in `code` whose arguments name a spend purpose, by line.
fn ledger_records(code: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (at, m) in code.match_indices(".record(") {
        let open = at + m.len() - 1;
        let mut depth = 0usize;
        let mut end = code.len();
        for (k, c) in code[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        if code[open..end].to_lowercase().contains("purpose") {
            out.push(code[..at].matches('\n').count() + 1);
        }
    }
    out
}

#[test]
fn the_model_is_reached_one_way() {
    let src = repo().join("gateway/src");
    let provider = stripped(&src.join("provider/mod.rs"));
    let methods = async_methods(provider_trait(&provider));
    let mut found = Vec::new();
    if methods.len() != 1 {
        found.push(format!(
            "gateway/src/provider/mod.rs: `ModelProvider` has {} model-calling methods ({}): \
             one entry point, a `Request` that says what the call is for",
            methods.len(),
            methods.join(", ")
        ));
    }
    let mut files = rust_files(&src);
    files.sort();
    for path in files {
        let rel = path
            .strip_prefix(repo())
            .expect("under the repository")
            .to_string_lossy()
            .to_string();
        let name = path.file_stem().map(|s| s.to_string_lossy().to_string());
        let name = name.unwrap_or_default();
        if name == "tests" || name.ends_with("_tests") {
            continue;
        }
        if LEDGER_WRITERS.iter().any(|(dir, _)| rel.starts_with(dir)) {
            continue;
        }
        for line in ledger_records(&stripped(&path)) {
            found.push(format!(
                "{rel}:{line}: a model call metered outside `provider::call` (build a \
                 `Request` with its `Payer` instead)"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "the model is reached more than one way:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_entry_point_rule_sees_what_it_measures() {
    let code = strip_comments_and_strings(
        "pub trait ModelProvider: Send {\n    fn model(&self) -> u8;\n    // async fn no(&self);\n    \
         async fn send(&self, r: &R) -> u8;\n    fn offers(&self) -> bool { false }\n}\nasync fn after() {}\n",
    );
    assert_eq!(async_methods(provider_trait(&code)), ["send"]);
    let code = "fn a() {\n    meter.record(who, Purpose::Reply, &m, t(x));\n    \
                breaker.record(|c| c.trip(now));\n    h.record(1.0);\n    m\n        .record(w, purpose, &m, t)\n}\n";
    assert_eq!(ledger_records(code), [2, 6]);
}
