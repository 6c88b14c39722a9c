//! The shape of the code, checked: rules a reviewer would otherwise have to re-check by hand
//! on every change (see `docs/architecture.md`, "Rules the tests keep").
//!
//! 1. **No import cycle between modules**, in the gateway, the connectors and the encoder crate. A
//!    module is a file (`a/b.rs`, or `a/mod.rs` for `a`). A file depends on every module it
//!    names by path (`use crate::x::y`, `super::z`, an inline `crate::x::f()`). A parent's
//!    own children are not dependencies of it: declaring and re-exporting them is what a
//!    parent does. Test modules are left out.
//! 2. **Ids are typed.** No parameter or field named `agent`, `agent_id`, `room` or
//!    `room_key` has a string type (`&str`, `String`, or either in an `Option`) in the
//!    gateway's non-test code: they are `AgentId` and `RoomKey`, parsed where they enter.
//! 3. to 5. **Size and shape** (`architecture/shape.rs`): no function over 80 lines of code,
//!    no file over 800 (production code and the tests crate alike), no `bool` parameter on
//!    the turn's path, no string-keyed map of personas or rooms.
//! 6. **One provider entry point** (`architecture/calls.rs`): the `ModelProvider` trait has
//!    one model-calling method, and only `provider::call` meters a model call.
//!
//! Run it alone with `cargo test -p troupe-e2e --test e2e architecture::`. It reads the source
//! tree, so it needs no build of the gateway and takes well under a second.
//!
//! The scanner is deliberately small, not a Rust parser: comments, string literals and
//! `#[cfg(test)]` modules are stripped, then paths are read from what is left. What it
//! cannot see (a path built in a macro, a glob re-export through the crate root) it
//! misses; it never reports a cycle that is not there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "architecture/calls.rs"]
mod calls;
#[path = "architecture/shape.rs"]
mod shape;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_path_buf()
}

/// A module path inside one crate: `[]` is the crate root, `["storage", "writer"]` is
/// `storage/writer.rs`.
type ModPath = Vec<String>;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// The non-test source of every module file of a crate, by module path.
fn modules(src: &Path) -> BTreeMap<ModPath, String> {
    let mut out = BTreeMap::new();
    for path in rust_files(src) {
        let rel = path.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let last = parts.last().cloned().unwrap_or_default();
        // The binary's entry point is its own crate; test files are test code.
        if parts == ["main"] || last == "tests" || last.ends_with("_tests") {
            continue;
        }
        if last == "mod" || parts == ["lib"] {
            parts.pop();
        }
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        out.insert(
            parts,
            strip_test_modules(&strip_comments_and_strings(&text)),
        );
    }
    out
}

/// Source with comments dropped and string and char literals blanked: a literal becomes
/// `""` or `' '` on the line it starts on, and a line comment leaves its line empty.
fn strip_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = block_comment_end(b, i);
                out.push(' ');
            }
            b'r' if matches!(b.get(i + 1), Some(b'#') | Some(b'"')) && starts_a_word(b, i) => {
                match raw_string_end(b, i) {
                    Some(end) => {
                        i = end;
                        out.push_str("\"\"");
                    }
                    None => {
                        out.push('r');
                        i += 1;
                    }
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' => match char_literal_end(text, i) {
                Some(end) => {
                    i = end;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            },
            _ => {
                let c = text[i..].chars().next().expect("a char boundary");
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// Whether the `r` at `i` starts a word, or follows the `b` of a byte string (`br"…"`).
fn starts_a_word(b: &[u8], i: usize) -> bool {
    let after = |k: usize| k == 0 || !is_ident(b[k - 1]);
    after(i) || (b[i - 1] == b'b' && after(i - 1))
}

/// One past the end of the (nested) block comment that opens at `i`.
fn block_comment_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// One past the end of the raw string literal (`r"…"`, `r#"…"#`) at `i`, or `None` if the
/// `r` does not start one.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    while j < b.len() && !b[j..].starts_with(&close) {
        j += 1;
    }
    Some(j + close.len())
}

/// One past the end of the char literal (`'x'`, `'\n'`, `'\''`) at `i`, or `None` for a
/// lifetime (`'a`).
fn char_literal_end(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(i + 1) == Some(&b'\\') {
        let mut j = i + 2;
        while j < b.len() && b[j] != b'\'' {
            j += 1;
        }
        return Some(j + 1);
    }
    let c = text[i + 1..].chars().next()?;
    text[i + 1 + c.len_utf8()..]
        .starts_with('\'')
        .then_some(i + 2 + c.len_utf8())
}

/// Removes `#[cfg(test)] mod x { … }` blocks and `#[cfg(test)] mod x;` declarations.
fn strip_test_modules(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let offset = out.len() - trimmed.len();
        let item_end = if trimmed.starts_with("mod ") {
            match (trimmed.find('{'), trimmed.find(';')) {
                (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                    offset + block_end(trimmed, open)
                }
                (_, Some(semi)) => offset + semi + 1,
                _ => out.len(),
            }
        } else {
            // A test-only item other than a module (an impl, a fn): keep it, it is small;
            // only blank the attribute so the loop moves on.
            at + "#[cfg(test)]".len()
        };
        out.replace_range(at..item_end, "");
    }
    out
}

/// The end (one past the closing brace) of the block that opens at `open` in stripped
/// source, or the text's end if it never closes.
fn block_end(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (k, ch) in text[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every path the source names that starts at `crate`, `super` or `self`, as its segments.
/// `use` trees with braces are expanded.
fn named_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !is_ident(b[i - 1]);
        if at_word && text[i..].starts_with("use ") {
            let end = text[i..].find(';').map_or(b.len(), |e| i + e);
            expand_use(&text[i + 4..end], Vec::new(), &mut paths);
            i = end;
            continue;
        }
        if at_word
            && ["crate::", "super::", "self::"]
                .iter()
                .any(|p| text[i..].starts_with(p))
        {
            let mut j = i;
            while j < b.len() && (is_ident(b[j]) || b[j] == b':') {
                j += 1;
            }
            paths.push(segments(&text[i..j]));
            i = j;
            continue;
        }
        i += 1;
    }
    paths
        .into_iter()
        .filter(|p| {
            matches!(
                p.first().map(String::as_str),
                Some("crate" | "super" | "self")
            )
        })
        .collect()
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Expands a use tree (`crate::a::{b, c::{d, e}}`) into its leaf paths.
fn expand_use(tree: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut path = prefix;
        let leaf = tree.split(" as ").next().unwrap_or(tree);
        path.extend(segments(leaf));
        out.push(path);
        return;
    };
    let mut path = prefix;
    path.extend(segments(&tree[..open]));
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut start = 0;
    for (k, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_use(&inner[start..k], path.clone(), out);
                start = k + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim().is_empty() {
        expand_use(&inner[start..], path, out);
    }
}

/// The module file a path lands in: the deepest existing module along it.
fn resolve(from: &ModPath, path: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut base: ModPath = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => from.clone(),
        "super" => {
            let mut m = from.clone();
            m.pop();
            m
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    // `super::super::…` climbs further.
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut target = base.clone();
    for seg in rest {
        let mut next = target.clone();
        next.push(seg.clone());
        if known.contains(&next) {
            target = next;
        } else {
            break;
        }
    }
    known.contains(&target).then_some(target)
}

/// The dependency graph of a crate's modules: file → files it names.
fn graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = modules(src);
    let known: BTreeSet<ModPath> = mods.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, text) in &mods {
        let mut to = BTreeSet::new();
        for path in named_paths(text) {
            if let Some(target) = resolve(module, &path, &known)
                && target != *module
                && !target.starts_with(module)
            {
                to.insert(target);
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// The strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        on_stack: BTreeSet<&'a ModPath>,
        stack: Vec<&'a ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on_stack: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn show(component: &[ModPath]) -> String {
    component
        .iter()
        .map(|m| {
            if m.is_empty() {
                "crate".to_string()
            } else {
                m.join("::")
            }
        })
        .collect::<Vec<_>>()
        .join(" ↔ ")
}

/// The same graph one level up: each top-level module with everything under it, so that
/// `bus::nats → ingress → bus` counts as the cycle it is.
fn top_level(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let head = |m: &ModPath| m.iter().take(1).cloned().collect::<ModPath>();
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (from, to) in edges {
        let entry = out.entry(head(from)).or_default();
        for t in to {
            if !t.is_empty() && head(t) != head(from) {
                entry.insert(head(t));
            }
        }
    }
    out
}

fn assert_acyclic(crate_dir: &str) {
    let edges = graph(&repo().join(crate_dir).join("src"));
    let mut found = cycles(&edges);
    for cycle in cycles(&top_level(&edges)) {
        if !found.contains(&cycle) {
            found.push(cycle);
        }
    }
    assert!(
        found.is_empty(),
        "{crate_dir}: modules that import each other (move the shared part into a module \
         below both):\n{}",
        found.iter().map(|c| show(c)).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_gateway_modules_have_no_import_cycle() {
    assert_acyclic("gateway");
}

#[test]
fn the_connector_modules_have_no_import_cycle() {
    assert_acyclic("connectors");
}

#[test]
fn the_encoder_modules_have_no_import_cycle() {
    assert_acyclic("encoder");
}

#[test]
fn agent_and_room_ids_are_typed_in_the_gateway() {
    const NAMES: [&str; 4] = ["agent", "agent_id", "room", "room_key"];
    const STRING_TYPES: [&str; 4] = ["&str", "String", "Option<&str>", "Option<String>"];
    let mut found = Vec::new();
    let src = repo().join("gateway/src");
    for (module, text) in modules(&src) {
        let b = text.as_bytes();
        for name in NAMES {
            let mut from = 0;
            while let Some(at) = text[from..].find(name).map(|k| from + k) {
                from = at + name.len();
                let bounded = (at == 0 || !is_ident(b[at - 1]))
                    && b.get(at + name.len()).is_none_or(|c| !is_ident(*c));
                if !bounded {
                    continue;
                }
                let after = text[at + name.len()..].trim_start();
                let Some(ty) = after.strip_prefix(':') else {
                    continue;
                };
                if ty.starts_with(':') {
                    continue; // a path (`room::x`), not a type ascription
                }
                // `&'a str`, `&mut String`: lifetimes and `mut` do not change the type.
                let ty: String = ty
                    .trim_start()
                    .replace("&'a ", "&")
                    .replace("&'static ", "&")
                    .replace("&mut ", "&")
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .take_while(|c| !matches!(c, ',' | ')' | ';' | '=' | '{'))
                    .collect();
                if STRING_TYPES.iter().any(|t| {
                    ty.starts_with(t)
                        && ty[t.len()..]
                            .chars()
                            .next()
                            .is_none_or(|c| !c.is_alphanumeric() && c != '_')
                }) {
                    let line = text[..at].matches('\n').count() + 1;
                    found.push(format!("{}: line {line}: `{name}: {ty}`", module.join("/")));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "agent and room ids must be `AgentId` and `RoomKey`, not strings:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_use_trees_and_strips_what_is_not_code() {
    let text = strip_test_modules(&strip_comments_and_strings(
        "use crate::{a::{B, c::D}, e as f};\n// use crate::zz;\nlet s = \"crate::yy\";\n\
         let t = br#\"crate::xx { \"#;\n\
         fn g() { super::h::i(); let c = '\"'; }\n#[cfg(test)]\nmod tests { use crate::t; }\n",
    ));
    let paths = named_paths(&text);
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        ["crate::a::B", "crate::a::c::D", "crate::e", "super::h::i"]
    );
    let mut edges = BTreeMap::new();
    let (a, b, c): (ModPath, ModPath, ModPath) =
        (vec!["a".into()], vec!["b".into()], vec!["c".into()]);
    edges.insert(a.clone(), BTreeSet::from([b.clone()]));
    edges.insert(b.clone(), BTreeSet::from([a.clone()]));
    edges.insert(c.clone(), BTreeSet::from([a.clone()]));
    assert_eq!(cycles(&edges), vec![vec![a, b]]);
}
