//! Every way in and every pointer out has a stated policy (issue 30, the systemic fix).
//!
//! `docs/security.md` keeps three tables under "Policy tables": the HTTP routes (who may
//! call each, what it reads and writes), the settings that name a URL, a path, a command or
//! a credential (who may set each, where it may point), and the character fields troupe
//! reads (whether each names one of those, and what bounds it). This test reads the source
//! and fails, naming the exact row to add and where, when one of them is missing a row:
//! a new feature states its policy before it passes CI.
//!
//! What it reads, as `tests/tests/architecture.rs` does (a small scanner, not a Rust parser;
//! comments are stripped first):
//! 1. **Routes**: the router built by `fn router` in `gateway/src/http/mod.rs`, followed
//!    through `.nest("/p", var)` (a `let var = Router::new()…;` of the same function) and
//!    `.merge(f(…))` (a function of `gateway/src/http/`), with each `.route("…", …)`'s
//!    methods (`get(`, `post(`, `.put(` …). A row names it as `` `METHOD /path` ``.
//! 2. **Settings**: every string literal in the non-test code of `gateway/src` and
//!    `connectors/src` that looks like a setting (`UPPER_SNAKE`) and ends in a suffix that
//!    names a URL, path, command or credential (`_URL`, `_ROOT`, `_DIR`, `_PATH(S)`, `_FILE`,
//!    `_KEY`, `_TOKEN`, `_SECRET`, `_COMMANDS`, `_HOSTS`, `_ENDPOINT`, `_ADDR`, `_ALLOW`,
//!    `_PROXIES`, `_UUID`, …), plus every setting named in the doc comment of a `Config`
//!    field whose type is a path, a socket address, a URL or a secret. A row names it as
//!    `` `NAME` ``.
//! 3. **Character fields**: `USED_FIELDS` of `gateway/src/persona/character.rs` (top-level
//!    fields troupe reads) and the keys its `settings` and `settings.troupe` readers match,
//!    and every key an MCP server's entry is read for (`.get("env")`, `text("command")` in
//!    `gateway/src/tools/servers.rs`: a program, its arguments, environment, working
//!    directory, URL; issue 43). A row names it as `` `field` ``, `` `settings.key` `` or
//!    `` `settings.mcp.servers.*.key` ``.
//!
//! Run it alone with `cargo test -p troupe-e2e --test e2e security_policy::`; it needs no build
//! of the gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The three tables' headings in docs/security.md, and the row each asks for.
const ROUTES: &str = "### Routes";
const SETTINGS: &str = "### Settings that name a URL, a path, a command or a credential";
const FIELDS: &str = "### Character fields";

// ---------------------------------------------------------------------------------------
// Source scanning

/// Whether a byte-by-byte scan is inside a string literal.
#[derive(Default)]
struct InString {
    inside: bool,
    escaped: bool,
}

impl InString {
    /// Feeds the next byte; true when it belongs to a string literal (its quotes included).
    fn feed(&mut self, b: u8) -> bool {
        if !self.inside {
            self.inside = b == b'"';
            return self.inside;
        }
        match b {
            _ if self.escaped => self.escaped = false,
            b'\\' => self.escaped = true,
            b'"' => self.inside = false,
            _ => {}
        }
        true
    }
}

/// `text` without `//` comments (string literals, which may hold `//`, are kept).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        // A quote as a character literal would look like the start of a string.
        let line = line.replace(r#"'"'"#, "'_'").replace(r#"'\"'"#, "'_'");
        let bytes = line.as_bytes();
        let mut string = InString::default();
        let cut = (0..bytes.len())
            .find(|&i| {
                !string.feed(bytes[i]) && bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'/')
            })
            .unwrap_or(line.len());
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// The non-test part of a source file: everything before `#[cfg(test)] mod tests`.
fn non_test(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The index just past the bracket that closes the one opening at `open` (`(` or `{`),
/// skipping string literals.
fn closing(text: &str, open: usize) -> usize {
    let bytes = text.as_bytes();
    let (o, c) = match bytes[open] {
        b'(' => (b'(', b')'),
        b'{' => (b'{', b'}'),
        other => panic!("not an opening bracket: {}", other as char),
    };
    let mut depth = 0usize;
    let mut string = InString::default();
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if string.feed(b) {
            continue;
        }
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    text.len()
}

/// The string literals in `text`, in order.
fn literals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('"') {
        let after = &rest[start + 1..];
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

/// The bodies of the functions of a file, by name.
fn functions(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("fn ") {
        let start = from + at + 3;
        from = start;
        let before = text[..start - 3].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(brace) = text[start..].find('{').map(|b| start + b) else {
            break;
        };
        // A declaration without a body (`fn f();`) ends before its `{`.
        if text[start..brace].contains(';') {
            continue;
        }
        let end = closing(text, brace);
        out.insert(name, text[brace..end].to_string());
        from = end;
    }
    out
}

/// The routers a function keeps in variables (`let api = Router::new()…;`), and its body
/// without them: the router it returns.
fn router_vars(body: &str) -> (BTreeMap<String, String>, String) {
    let mut vars = BTreeMap::new();
    let mut rest = body.to_string();
    while let Some(at) = rest.find("let ") {
        let after = &rest[at + 4..];
        let name: String = after
            .trim_start_matches("mut ")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(eq) = after.find('=') else { break };
        let value_start = at + 4 + eq + 1;
        // The statement ends at the first `;` outside brackets.
        let bytes = rest.as_bytes();
        let mut i = value_start;
        let mut end = rest.len();
        while i < rest.len() {
            match bytes[i] {
                b'(' | b'{' => i = closing(&rest, i),
                b'"' => i += 1 + rest[i + 1..].find('"').unwrap_or(0) + 1,
                b';' => {
                    end = i + 1;
                    break;
                }
                _ => i += 1,
            }
        }
        let value = rest[value_start..end].to_string();
        if value.trim_start().starts_with("Router::new()") {
            vars.insert(name, value);
            rest.replace_range(at..end, "");
        } else {
            // Not a router: leave it, look further.
            rest.replace_range(at..at + 4, "    ");
        }
    }
    (vars, rest)
}

/// The HTTP methods a route's handler expression names: `get(…)`, `.post(…)` ….
fn methods(handler: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (word, method) in [
        ("get(", "GET"),
        ("post(", "POST"),
        ("put(", "PUT"),
        ("patch(", "PATCH"),
        ("delete(", "DELETE"),
        ("any(", "ANY"),
    ] {
        let mut from = 0;
        while let Some(at) = handler[from..].find(word) {
            let i = from + at;
            from = i + word.len();
            let before = handler[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if !out.contains(&method) {
                out.push(method);
            }
        }
    }
    out
}

/// The http module's functions, by file stem and name.
struct Http {
    files: BTreeMap<String, BTreeMap<String, String>>,
}

impl Http {
    fn load() -> Http {
        let dir = repo().join("gateway/src/http");
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).expect("gateway/src/http") {
            let path = entry.expect("an entry").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).expect("a source file");
            files.insert(stem, functions(&strip_comments(non_test(&text))));
        }
        Http { files }
    }

    /// `(method, path)` of every route of the router a chain builds.
    fn routes(
        &self,
        file: &str,
        chain: &str,
        vars: &BTreeMap<String, String>,
        prefix: &str,
    ) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        let mut i = 0;
        while i < chain.len() {
            let next = ["route(", "nest(", "merge("]
                .iter()
                .filter_map(|w| chain[i..].find(&format!(".{w}")).map(|at| (i + at, *w)))
                .min();
            let Some((at, word)) = next else { break };
            let open = at + 1 + word.len() - 1;
            let end = closing(chain, open);
            let args = &chain[open + 1..end - 1];
            i = end;
            match word {
                "route(" => {
                    let path = literals(args).into_iter().next().expect("a route's path");
                    let handler = &args[args.find(',').unwrap_or(0)..];
                    for method in methods(handler) {
                        out.insert((method.to_string(), join(prefix, &path)));
                    }
                }
                "nest(" => {
                    let nested = literals(args).into_iter().next().expect("a nest's path");
                    let var = args[args.find(',').expect("nest(path, router)") + 1..].trim();
                    let inner = match vars.get(var) {
                        Some(v) => v.clone(),
                        None => var.to_string(),
                    };
                    out.extend(self.routes(file, &inner, vars, &join(prefix, &nested)));
                }
                _ => {
                    let call = args.trim();
                    let callee = &call[..call.find('(').unwrap_or(call.len())];
                    let (callee_file, name) = match callee.rsplit_once("::") {
                        Some((module, name)) => (module.rsplit("::").next().unwrap(), name),
                        None => (file, callee),
                    };
                    if let Some(body) = self.files.get(callee_file).and_then(|f| f.get(name)) {
                        let (inner_vars, returned) = router_vars(body);
                        out.extend(self.routes(callee_file, &returned, &inner_vars, prefix));
                    } else {
                        // An inline router, or a variable of this function.
                        let inner = vars.get(call).cloned().unwrap_or_else(|| call.to_string());
                        out.extend(self.routes(file, &inner, vars, prefix));
                    }
                }
            }
        }
        out
    }
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix, path) {
        ("", p) => p.to_string(),
        (pre, "/") => pre.to_string(),
        (pre, p) => format!("{pre}{p}"),
    }
}

/// Every route of the gateway's router, as `METHOD /path`.
fn gateway_routes() -> BTreeSet<String> {
    let http = Http::load();
    let body = http.files["mod"]
        .get("router")
        .expect("fn router in gateway/src/http/mod.rs")
        .clone();
    let (vars, returned) = router_vars(&body);
    http.routes("mod", &returned, &vars, "")
        .into_iter()
        .map(|(m, p)| format!("{m} {p}"))
        .collect()
}

/// Name endings that say a setting names a URL, a path, a command or a credential.
const SUFFIXES: &[&str] = &[
    "_URL",
    "_URLS",
    "_ROOT",
    "_DIR",
    "_PATH",
    "_PATHS",
    "_FILE",
    "_KEY",
    "_TOKEN",
    "_TOKENS",
    "_SECRET",
    "_COMMAND",
    "_COMMANDS",
    "_CWDS",
    "_HOSTS",
    "_ENDPOINT",
    "_ADDR",
    "_ALLOW",
    "_PROXIES",
    "_UUID",
];

/// Files whose setting-like names are other programs' variables, which troupe refuses and
/// never reads: the floor of variables no character may give an MCP server (issue 43).
const NOT_SETTINGS: &[&str] = &["gateway/src/tools/floor.rs"];

/// Field types in `Config` that hold a URL, a path, an address or a credential.
const POINTER_TYPES: &[&str] = &["PathBuf", "SecretString", "Url", "SocketAddr"];

fn is_setting_name(s: &str) -> bool {
    s.len() > 2
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The non-test source files of a crate.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            // Benchmarks are not served; they read no setting of their own.
            if name != "bench" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs")
            // Test modules kept in files of their own (`storage/*_tests.rs`, each declared
            // under `#[cfg(test)]`): what they read is the test runner's, never served.
            && !name.ends_with("_tests.rs")
            && ![
                "tests.rs",
                "fuzzing.rs",
                "test_support.rs",
                "conformance.rs",
            ]
            .contains(&name.as_str())
        {
            out.push(path);
        }
    }
}

/// Every setting that names a URL, a path, a command or a credential, with a file that
/// reads it.
fn pointer_settings() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    sources(&repo().join("gateway/src"), &mut files);
    sources(&repo().join("connectors/src"), &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        let rel = file.strip_prefix(repo()).unwrap().display().to_string();
        if NOT_SETTINGS.contains(&rel.as_str()) {
            continue;
        }
        for lit in literals(&strip_comments(non_test(&text))) {
            if is_setting_name(&lit) && SUFFIXES.iter().any(|s| lit.ends_with(s)) {
                out.entry(lit).or_insert_with(|| rel.clone());
            }
        }
    }
    // Config fields typed as a pointer: the settings their doc comment names. The
    // configuration is a directory, one file per topic (`config/mod.rs`, `config/edge.rs`…).
    for rel in config_files() {
        let config = read(&rel);
        let mut docs: Vec<&str> = Vec::new();
        for line in non_test(&config).lines() {
            let line = line.trim();
            if let Some(doc) = line.strip_prefix("///") {
                docs.push(doc);
                continue;
            }
            let is_field = line.starts_with("pub ") && line.contains(':') && line.ends_with(',');
            if is_field && POINTER_TYPES.iter().any(|t| line.contains(t)) {
                for doc in &docs {
                    for name in doc.split('`').skip(1).step_by(2) {
                        if is_setting_name(name) {
                            out.entry(name.to_string()).or_insert_with(|| rel.clone());
                        }
                    }
                }
            }
            if !line.starts_with("#[") {
                docs.clear();
            }
        }
    }
    out
}

/// The non-test files of `gateway/src/config/`, relative to the repository, in order.
fn config_files() -> Vec<String> {
    let mut files = Vec::new();
    sources(&repo().join("gateway/src/config"), &mut files);
    files.sort();
    assert!(!files.is_empty(), "gateway/src/config/ holds the settings");
    files
        .iter()
        .map(|f| f.strip_prefix(repo()).unwrap().display().to_string())
        .collect()
}

/// The character fields troupe reads: top-level, `settings.*`, `settings.troupe.*`.
fn character_fields() -> BTreeSet<String> {
    let text = strip_comments(non_test(&read("gateway/src/persona/character.rs")));
    let start = text
        .find("const USED_FIELDS")
        .expect("USED_FIELDS in character.rs");
    let open = start + text[start..].find('[').unwrap() + 1;
    let list_open = open + text[open..].find('[').unwrap();
    let list = &text[list_open..closing_square(&text, list_open)];
    let mut out: BTreeSet<String> = literals(list).into_iter().collect();
    // The `settings` readers live beside the character reader (persona/settings.rs since
    // the split of issue 31): read every file of the persona module, wherever they move.
    let mut files = Vec::new();
    sources(&repo().join("gateway/src/persona"), &mut files);
    files.sort();
    let persona: String = files
        .iter()
        .map(|f| strip_comments(non_test(&std::fs::read_to_string(f).expect("readable"))))
        .collect::<Vec<_>>()
        .join("\n");
    let fns = functions(&persona);
    out.extend(mcp_server_fields());
    for (function, prefix) in [
        ("settings", "settings."),
        // One member of `settings` (or of 2.x's `settings.extra`), read for `settings`.
        ("setting", "settings."),
        ("troupe_settings", "settings.troupe."),
        // elizaOS 2.x's several Telegram bots (issue 46, persona/accounts.rs).
        ("telegram_settings", "settings.telegram."),
        ("telegram_account", "settings.telegram.accounts.*."),
    ] {
        let body = fns
            .get(function)
            .unwrap_or_else(|| panic!("fn {function} in gateway/src/persona/"));
        for line in body.lines().filter(|l| l.contains("=>")) {
            let pattern = &line[..line.find("=>").unwrap()];
            for key in literals(pattern) {
                out.insert(format!("{prefix}{key}"));
            }
        }
    }
    out
}

/// The keys of an MCP server's entry that troupe reads (`settings.mcp.servers.*.env`…):
/// every `get("key")` and `text("key")` in the non-test code of `tools/servers.rs`.
fn mcp_server_fields() -> BTreeSet<String> {
    let text = strip_comments(non_test(&read("gateway/src/tools/servers.rs")));
    let mut out = BTreeSet::new();
    for call in ["get(\"", "text(\""] {
        for (at, _) in text.match_indices(call) {
            let rest = &text[at + call.len()..];
            let key = &rest[..rest.find('"').unwrap_or(0)];
            if key == "servers" {
                out.insert("settings.mcp.servers".to_string());
            } else if !key.is_empty() {
                out.insert(format!("settings.mcp.servers.*.{key}"));
            }
        }
    }
    out
}

fn closing_square(text: &str, open: usize) -> usize {
    text[open..]
        .find("];")
        .map(|i| open + i)
        .expect("a closed list")
}

// ---------------------------------------------------------------------------------------
// The document

/// The backquoted names in the first column of the table under `heading`.
fn documented(doc: &str, heading: &str) -> BTreeSet<String> {
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/security.md has no section `{heading}`"));
    let section = &doc[start + heading.len() + 2..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    let mut out = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let first = line.split('|').nth(1).unwrap_or("");
        for name in first.split('`').skip(1).step_by(2) {
            out.insert(name.trim().to_string());
        }
    }
    out
}

/// One policy table: its heading, what the source says it must list (name → where it is
/// read), names the scanner must find, and the row to suggest for a missing one.
struct Table {
    heading: &'static str,
    wanted: BTreeMap<String, String>,
    sure: &'static [&'static str],
    row: fn(&str, &str) -> String,
}

/// The rows `wanted` (name → where it is read) lacks in the table under `heading`, each as
/// the sentence that says what to add where.
fn missing_rows(
    doc: &str,
    heading: &str,
    wanted: &BTreeMap<String, String>,
    row: fn(&str, &str) -> String,
) -> Vec<String> {
    let have = documented(doc, heading);
    wanted
        .iter()
        .filter(|(name, _)| !have.contains(*name))
        .map(|(name, from)| {
            format!(
                "docs/security.md, table under `{heading}`: add the row\n    {}",
                row(name, from)
            )
        })
        .collect()
}

#[test]
fn every_route_setting_and_character_field_has_a_stated_policy() {
    let doc = read("docs/security.md");
    let by_name = |names: BTreeSet<String>| -> BTreeMap<String, String> {
        names.into_iter().map(|n| (n, String::new())).collect()
    };
    let tables = [
        Table {
            heading: ROUTES,
            wanted: by_name(gateway_routes()),
            sure: &["GET /healthz", "POST /api/agents/{agent}/messages"],
            row: |route, _| {
                format!("| `{route}` | who may call it | what it reads | what it writes |")
            },
        },
        Table {
            heading: SETTINGS,
            wanted: pointer_settings(),
            sure: &["TELEGRAM_API_ROOT", "TROUPE_PERSONAS"],
            row: |name, from| {
                format!("| `{name}` | who may set it (read in {from}) | where it may point |")
            },
        },
        Table {
            heading: FIELDS,
            wanted: by_name(character_fields()),
            sure: &[
                "knowledge",
                "settings.secrets",
                "settings.mcp.servers.*.env",
                "settings.mcp.servers.*.args",
                "settings.mcp.servers.*.cwd",
            ],
            row: |field, _| {
                format!(
                    "| `{field}` | does it name a URL, a path, a command or a credential? | \
                     who may set it, where it may point |"
                )
            },
        },
    ];
    let mut problems = Vec::new();
    for table in &tables {
        // What the scanner must find, or it has lost its way in the source.
        for &name in table.sure {
            assert!(
                table.wanted.contains_key(name),
                "the scanner for `{}` missed {name}: {:#?}",
                table.heading,
                table.wanted
            );
        }
        problems.extend(missing_rows(&doc, table.heading, &table.wanted, table.row));
    }
    assert!(
        problems.is_empty(),
        "{} policy row(s) missing: every route, every setting that names a URL, path, command \
         or credential, and every character field troupe reads must say who may use it and \
         where it may point.\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_scanner_follows_nests_and_merges() {
    let body = r#"{
        let api = Router::new()
            .route("/a/{x}", get(h).post(h2)) // .route("/commented", get(h))
            .merge(more());
        Router::new().route("/", get(index)).nest("/api", api)
    }"#;
    let (vars, returned) = router_vars(&strip_comments(body));
    let mut files = BTreeMap::new();
    files.insert(
        "mod".to_string(),
        BTreeMap::from([(
            "more".to_string(),
            r#"{ Router::new().route("/b", delete(budget_delete)) }"#.to_string(),
        )]),
    );
    let http = Http { files };
    let got: Vec<String> = http
        .routes("mod", &returned, &vars, "")
        .into_iter()
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert_eq!(
        got,
        [
            "DELETE /api/b",
            "GET /",
            "GET /api/a/{x}",
            "POST /api/a/{x}"
        ]
    );
}
