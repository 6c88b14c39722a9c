//! Rules on the size and the signatures of the production code (issue 31), read from the
//! same stripped source as the import rules: comments, string literals and `#[cfg(test)]`
//! modules are gone, so what is measured is code.
//!
//! 3. **No function over 80 lines of code**, and **no file over 800**, in the gateway, the
//!    connectors and the encoder, and in the tests crate (its fakes and helpers in
//!    `tests/src`, its tests in `tests/tests`; issue 45): a test is read like any other
//!    code, and a long one hides which step failed. A line of code is a line that is not
//!    blank once comments are dropped; a string literal counts as the one line it starts
//!    on. The crates' unit tests (`tests.rs`, `*_tests.rs`, `#[cfg(test)]` modules, a file
//!    declared under a `cfg(…test…)`) are not measured: a long table of cases is easier to
//!    read whole.
//! 4. **No `bool` parameter on a function of the turn's path** that other modules call
//!    (`pub`, `pub(crate)`, `pub(super)`): a call site reads `publish(…, true, …)`, and
//!    only the signature says what `true` means. An enum (`Delivery::Again`) says it where
//!    it is written. The turn's path is the modules a message crosses from the journal to
//!    the outbox, listed in `TURN_PATH`.
//! 5. **Maps of personas and rooms are keyed by their ids** (`AgentId`, `RoomKey`,
//!    `OrderKey`), not `String`: a map whose binding is named for an agent, a persona or a
//!    room, or whose values are agents, may not have a `String` or `&str` key. The check
//!    reads names, so a map of persona ids under an unrelated name escapes it; review
//!    catches those, as it caught `App::running`.
//!
//! Each rule has an allowlist of `(where, why)`. They start empty; an entry needs its reason.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{
    block_end, is_ident, repo, rust_files, strip_comments_and_strings, strip_test_modules,
};

const MAX_FUNCTION_LINES: usize = 80;
const MAX_FILE_LINES: usize = 800;

/// Functions allowed past `MAX_FUNCTION_LINES`, as `crate/path/file.rs::name`, with why.
const LONG_FUNCTIONS: &[(&str, &str)] = &[];
/// Files allowed past `MAX_FILE_LINES`, with why.
const LONG_FILES: &[(&str, &str)] = &[];
/// `bool` parameters allowed on the turn's path, as `path::function::parameter`, with why.
const BOOL_PARAMETERS: &[(&str, &str)] = &[];
/// String-keyed maps allowed, as `path::binding`, with why.
const STRING_KEYED_MAPS: &[(&str, &str)] = &[];

/// The gateway's modules a message crosses on its way in, through its turn and out.
/// `metrics` is not one: it counts what the path did, and its flags are label values.
const TURN_PATH: &[&str] = &[
    "ingress", "bus", "agent", "rooms", "memory", "spend", "provider", "storage", "outbox",
    "registry",
];

/// A production source file: its path from the repository root, and its stripped text.
struct Source {
    path: String,
    code: String,
}

/// Every production `.rs` file of the gateway and the connectors, stripped.
fn production_sources() -> Vec<Source> {
    let mut out = Vec::new();
    for krate in ["gateway", "connectors", "encoder"] {
        let src = repo().join(krate).join("src");
        let files = rust_files(&src);
        let test_only = test_only_files(&files);
        for path in files {
            let name = path.file_stem().map(|s| s.to_string_lossy().to_string());
            let name = name.unwrap_or_default();
            if name == "tests" || name.ends_with("_tests") || test_only.contains(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            out.push(Source {
                path: path
                    .strip_prefix(repo())
                    .expect("under the repository")
                    .to_string_lossy()
                    .to_string(),
                code: strip_test_modules(&strip_comments_and_strings(&text)),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Every `.rs` file of the tests crate (`tests/src`, `tests/tests`), whole: there, test
/// modules are the code.
fn test_crate_sources() -> Vec<Source> {
    let mut out = Vec::new();
    for dir in ["src", "tests"] {
        for path in rust_files(&repo().join("tests").join(dir)) {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            out.push(Source {
                path: path
                    .strip_prefix(repo())
                    .expect("under the repository")
                    .to_string_lossy()
                    .to_string(),
                code: strip_comments_and_strings(&text),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// What the size rules measure: the production sources and the tests crate's.
fn measured_sources() -> Vec<Source> {
    let mut out = production_sources();
    out.extend(test_crate_sources());
    out
}

/// Files whose `mod` declaration sits under a `#[cfg(…test…)]` (the connectors'
/// conformance suite is declared `#[cfg(all(test, …))]`).
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for file in files {
        let text = strip_comments_and_strings(&std::fs::read_to_string(file).expect("readable"));
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().expect("a parent").to_path_buf(),
            _ => file.with_extension(""),
        };
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(") {
            let end = rest[at..].find(']').map_or(rest.len(), |e| at + e + 1);
            let attribute = &rest[at..end];
            rest = &rest[end..];
            let declares = rest.trim_start().strip_prefix("mod ").map(|m| {
                m.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default()
                    .to_string()
            });
            if let Some(module) = declares
                && attribute
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|w| w == "test")
            {
                out.push(dir.join(format!("{module}.rs")));
                out.push(dir.join(&module).join("mod.rs"));
            }
        }
    }
    out
}

/// Lines that hold code in `text` (stripped source): not blank.
fn lines_of_code(text: &str) -> usize {
    text.lines().filter(|l| !l.trim().is_empty()).count()
}

/// One `fn` item: its name, the line it starts on, and its text from `fn` to the closing
/// brace of its body. Declarations without a body (trait methods) are skipped.
struct Function<'a> {
    name: &'a str,
    line: usize,
    text: &'a str,
    signature: &'a str,
    visibility: &'a str,
}

fn functions(code: &str) -> Vec<Function<'_>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ").map(|k| from + k) {
        from = at + 3;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let rest = &code[at + 3..];
        let name_len = rest.bytes().take_while(|c| is_ident(*c)).count();
        if name_len == 0 {
            continue; // a function pointer type, `fn(u8) -> u8`
        }
        let name = &rest[..name_len];
        let Some(open) = code[at..].find(['{', ';']).map(|k| at + k) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let end = block_end(code, open);
        let line_start = code[..at].rfind('\n').map_or(0, |k| k + 1);
        out.push(Function {
            name,
            line: code[..at].matches('\n').count() + 1,
            text: &code[at..end],
            signature: &code[at..open],
            visibility: code[line_start..at].trim(),
        });
    }
    out
}

fn allowed(list: &[(&str, &str)], what: &str) -> bool {
    list.iter().any(|(entry, why)| {
        assert!(
            !why.trim().is_empty(),
            "allowlist entry `{entry}` needs its reason"
        );
        *entry == what
    })
}

fn assert_none(rule: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{rule}:\n{}", found.join("\n"));
}

#[test]
fn no_function_is_over_80_lines_of_code() {
    let mut found = Vec::new();
    for source in measured_sources() {
        for f in functions(&source.code) {
            let lines = lines_of_code(f.text);
            let what = format!("{}::{}", source.path, f.name);
            if lines > MAX_FUNCTION_LINES && !allowed(LONG_FUNCTIONS, &what) {
                found.push(format!(
                    "{}:{}: `{}` has {lines} lines of code",
                    source.path, f.line, f.name
                ));
            }
        }
    }
    assert_none(
        &format!(
            "functions over {MAX_FUNCTION_LINES} lines of code (split them into named steps; \
             the caller should read as the recipe)"
        ),
        found,
    );
}

#[test]
fn no_file_is_over_800_lines_of_code() {
    let mut found = Vec::new();
    for source in measured_sources() {
        let lines = lines_of_code(&source.code);
        if lines > MAX_FILE_LINES && !allowed(LONG_FILES, &source.path) {
            found.push(format!("{}: {lines} lines of code", source.path));
        }
    }
    assert_none(
        &format!(
            "files over {MAX_FILE_LINES} lines of code (split them by job, each part with a \
             `//!` header saying what it owns)"
        ),
        found,
    );
}

/// The `bool` parameters of a signature: `name: bool` outside any generic or nested type.
fn bool_parameters(signature: &str) -> Vec<String> {
    let Some(open) = signature.find('(') else {
        return Vec::new();
    };
    let params = &signature[open + 1..signature.rfind(')').unwrap_or(signature.len())];
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (k, c) in params.char_indices().chain([(params.len(), ',')]) {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                let param = params[start..k].trim();
                if let Some((name, ty)) = param.split_once(':')
                    && ty.trim() == "bool"
                {
                    out.push(name.trim().trim_start_matches("mut ").to_string());
                }
                start = k + 1;
            }
            _ => {}
        }
    }
    out
}

#[test]
fn functions_of_the_turns_path_take_no_bool_parameter() {
    let mut found = Vec::new();
    for source in production_sources() {
        let Some(module) = source.path.strip_prefix("gateway/src/") else {
            continue;
        };
        let top = module.split(['/', '.']).next().unwrap_or_default();
        if !TURN_PATH.contains(&top) {
            continue;
        }
        for f in functions(&source.code) {
            if !f
                .visibility
                .split_whitespace()
                .any(|w| w.starts_with("pub"))
            {
                continue;
            }
            for param in bool_parameters(f.signature) {
                let what = format!("{}::{}::{param}", source.path, f.name);
                if !allowed(BOOL_PARAMETERS, &what) {
                    found.push(format!(
                        "{}:{}: `{}({param}: bool)`",
                        source.path, f.line, f.name
                    ));
                }
            }
        }
    }
    assert_none(
        "`bool` parameters on the turn's path (an enum names the case where it is passed)",
        found,
    );
}

#[test]
fn maps_of_personas_and_rooms_are_keyed_by_their_ids() {
    const NAMED: [&str; 3] = ["agent", "persona", "room"];
    const VALUES: [&str; 2] = ["Agent>", "Agent,"];
    let mut found = Vec::new();
    for source in production_sources() {
        if !source.path.starts_with("gateway/") {
            continue;
        }
        for (n, line) in source.code.lines().enumerate() {
            for map in ["HashMap<", "BTreeMap<"] {
                let Some(at) = line.find(map) else {
                    continue;
                };
                let inner = line[at + map.len()..].trim_start();
                let keyed_by_string = inner.starts_with("String,")
                    || inner.starts_with("&str,")
                    || inner.starts_with("&'");
                if !keyed_by_string {
                    continue;
                }
                let binding = line[..at]
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .find(|w| w.ends_with(':') && !w.ends_with("::") && w.len() > 1)
                    .map(|w| w.trim_end_matches(':').to_lowercase())
                    .unwrap_or_default();
                let named = NAMED.iter().any(|w| binding.contains(w));
                let holds_agents = VALUES.iter().any(|v| line[at..].contains(v));
                let what = format!("{}::{binding}", source.path);
                if (named || holds_agents) && !allowed(STRING_KEYED_MAPS, &what) {
                    found.push(format!("{}:{}: `{}`", source.path, n + 1, line.trim()));
                }
            }
        }
    }
    assert_none(
        "maps of personas or rooms keyed by a string (key them by `AgentId`, `RoomKey` or \
         `OrderKey`)",
        found,
    );
}

#[test]
fn the_shape_rules_see_what_they_measure() {
    let code = strip_test_modules(&strip_comments_and_strings(
        "pub(crate) fn a(x: bool, y: Option<bool>, z: HashMap<u8, bool>) {\n    // c\n    let s = \"{\";\n\n    g();\n}\n\
         fn b(f: fn(bool) -> bool) -> u8 { 1 }\ntrait T { fn c(&self, on: bool); }\n\
         #[cfg(test)]\nmod tests { fn d() {} }\n",
    ));
    let fs = functions(&code);
    let names: Vec<&str> = fs.iter().map(|f| f.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(lines_of_code(fs[0].text), 4);
    assert_eq!(fs[0].visibility, "pub(crate)");
    assert_eq!(bool_parameters(fs[0].signature), ["x"]);
    assert!(bool_parameters(fs[1].signature).is_empty());
    let sources: BTreeMap<String, usize> = production_sources()
        .into_iter()
        .map(|s| (s.path, 0))
        .collect();
    assert!(sources.contains_key("gateway/src/agent/mod.rs"));
    assert!(
        !sources.contains_key("connectors/src/conformance.rs"),
        "test-only"
    );
    assert!(!sources.contains_key("gateway/src/storage/tests.rs"));
    let measured: Vec<String> = measured_sources().into_iter().map(|s| s.path).collect();
    for test_code in [
        "tests/src/app.rs",
        "tests/src/fake_openai/tests.rs",
        "tests/tests/console/guards.rs",
        "tests/tests/architecture/shape.rs",
    ] {
        assert!(measured.iter().any(|p| p == test_code), "{test_code}");
    }
}
