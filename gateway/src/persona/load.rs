//! Loading: reading a character file (and the parents it `extends`) into a [`Persona`].
//!
//! `extends` follows elizaOS: each entry is a path relative to the file that names it;
//! parents are merged in order (a later parent overrides an earlier one) and the file itself
//! goes on top. Merging is elizaOS's deep merge: objects merge key by key, lists are
//! concatenated (parent items first), and any other value from the child replaces the
//! parent's. A string `bio` meeting a list `bio` counts as a one-item list. Because merging
//! happens on the positioned tree, a mistake inherited from a parent is reported in the
//! parent's file, at its line. A cycle is an error at the `extends` entry that closes it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::character::{self, Character};
use super::diag::{Diagnostic, Diags};
use super::json::{self, Kind, Member, Node};
use super::paths::{LoadOptions, Policy};
use super::{Loaded, Persona};
use troupe_connectors::AgentId;

/// Reads and checks one character file, with no knowledge roots beyond its own directory
/// (see [`load_file_with`]).
#[cfg(test)]
pub fn load_file(path: &Path) -> Result<Loaded, Vec<Diagnostic>> {
    load_file_with(path, &LoadOptions::default())
}

/// Reads and checks one character file. On success the warnings travel with the persona;
/// on failure every diagnostic (errors first by position, warnings too) is returned. A
/// `knowledge` path outside the file's directory and `options.knowledge_roots` is a warning
/// and the persona loads without it (see `paths`).
pub fn load_file_with(path: &Path, options: &LoadOptions) -> Result<Loaded, Vec<Diagnostic>> {
    load(path, &Policy::new(path, options, false))
}

/// [`load_file_with`] under `policy`: `troupe check` passes a strict one.
pub(crate) fn load(path: &Path, policy: &Policy) -> Result<Loaded, Vec<Diagnostic>> {
    let mut d = Diags::default();
    let mut stack = Vec::new();
    let mut deps = Vec::new();
    let tree = read_tree(path, &mut stack, &mut deps, &mut d);
    let character = match &tree {
        Some(tree) if !d.has_errors() => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            Some(character::from_node(tree, &cwd, policy, &mut d))
        }
        _ => None,
    };
    let mut list = d.list;
    list.sort_by(|a, b| {
        (a.severity, &a.file, a.line, a.col).cmp(&(b.severity, &b.file, b.line, b.col))
    });
    match (tree, character) {
        (Some(tree), Some(character)) if !list.iter().any(Diagnostic::is_error) => Ok(Loaded {
            persona: Persona::new(path, tree.to_value(), character, deps),
            warnings: list,
        }),
        _ => Err(list),
    }
}

/// Every `*.json` character file directly in `dir` (sorted by name; names starting with `.`
/// are skipped, as editors use them for swap files). Parents shared through `extends` belong
/// in a subdirectory, so they are not loaded as personas of their own.
///
/// Returns the personas that loaded and the diagnostics of the files that did not. Two files
/// with the same persona id: the second is refused with an error naming the first.
pub fn load_dir(dir: &Path, options: &LoadOptions) -> (Vec<Loaded>, Vec<Diagnostic>) {
    let mut ok: Vec<Loaded> = Vec::new();
    let mut bad = Vec::new();
    let paths = match persona_files(dir) {
        Ok(p) => p,
        Err(e) => {
            bad.push(Diagnostic::file(
                dir,
                "(dir)",
                format!("cannot read the directory: {e}"),
            ));
            return (ok, bad);
        }
    };
    for p in paths {
        match load_file_with(&p, options) {
            Ok(l) => {
                if let Some(first) = ok.iter().find(|o| o.persona.id == l.persona.id) {
                    bad.push(duplicate_id(&l.persona, &first.persona));
                } else {
                    ok.push(l);
                }
            }
            Err(d) => bad.extend(d),
        }
    }
    (ok, bad)
}

/// An error on `persona` saying `other` already has its id.
pub(crate) fn duplicate_id(persona: &Persona, other: &Persona) -> Diagnostic {
    let field = if persona.character.id.is_some() {
        "id"
    } else {
        "name"
    };
    let hint = if field == "id" {
        "give each persona its own \"id\""
    } else {
        "the id comes from the name: rename one, or set an \"id\""
    };
    Diagnostic::at_field(
        persona,
        field,
        format!(
            "persona id \"{}\" is also used by {}; ids must be unique ({hint})",
            persona.id,
            other.source.display()
        ),
    )
}

/// The `*.json` files directly in `dir`, sorted.
pub(crate) fn persona_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_persona_file(p))
        .collect();
    paths.sort();
    Ok(paths)
}

pub(crate) fn is_persona_file(p: &Path) -> bool {
    let visible = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| !n.starts_with('.'));
    visible && p.extension().is_some_and(|e| e == "json") && p.is_file()
}

/// Reads, parses and merges `path` with its parents. `stack` holds the files being read
/// (for cycle detection); `deps` collects every parent file.
fn read_tree(
    path: &Path,
    stack: &mut Vec<PathBuf>,
    deps: &mut Vec<PathBuf>,
    d: &mut Diags,
) -> Option<Node> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            d.list.push(Diagnostic::file(
                path,
                "(file)",
                format!("cannot read the file: {e}"),
            ));
            return None;
        }
    };
    let file: Arc<Path> = Arc::from(path);
    let (mut node, dups) = match json::parse(&text, file) {
        Ok(x) => x,
        Err(e) => {
            d.list.push(Diagnostic {
                file: path.to_path_buf(),
                line: e.line,
                col: e.col,
                path: "(json)".into(),
                message: e.message,
                severity: super::Severity::Error,
            });
            return None;
        }
    };
    for dup in dups {
        d.warn(
            &dup.pos,
            &dup.key,
            "this field appears again later in the same object; the later value is used",
        );
    }

    let Some(ext) = take_extends(&mut node) else {
        return Some(node);
    };
    let entries: Vec<&Node> = match &ext.value.kind {
        Kind::Array(items) => items.iter().collect(),
        Kind::String(_) => vec![&ext.value],
        Kind::Null => Vec::new(),
        _ => {
            d.wrong_type(&ext.value, "extends", "a list of file paths");
            return Some(node);
        }
    };
    let me = canonical(path);
    stack.push(me);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut merged: Option<Node> = None;
    for (i, entry) in entries.into_iter().enumerate() {
        let p = if matches!(ext.value.kind, Kind::Array(_)) {
            format!("extends[{i}]")
        } else {
            "extends".to_string()
        };
        let Some(rel) = entry.as_str() else {
            d.wrong_type(entry, &p, "a file path (a string)");
            continue;
        };
        let parent = dir.join(rel);
        if !parent.is_file() {
            d.error(
                &entry.pos,
                &p,
                format!(
                    "parent file \"{rel}\" not found (looked for {})",
                    parent.display()
                ),
            );
            continue;
        }
        let canon = canonical(&parent);
        if let Some(at) = stack.iter().position(|s| *s == canon) {
            let chain: Vec<String> = stack[at..]
                .iter()
                .chain(std::iter::once(&canon))
                .map(|s| short(s))
                .collect();
            d.error(
                &entry.pos,
                &p,
                format!("extends cycle: {}", chain.join(" → ")),
            );
            continue;
        }
        if !deps.contains(&canon) {
            deps.push(canon);
        }
        if let Some(mut parent_tree) = read_tree(&parent, stack, deps, d) {
            // The parent's own `extends` was followed already; it is not inherited.
            take_extends(&mut parent_tree);
            merged = Some(match merged {
                Some(m) => merge(m, parent_tree),
                None => parent_tree,
            });
        }
    }
    stack.pop();
    // The `extends` entry itself stays on the child, so `raw` shows what was written.
    node_push(&mut node, ext);
    Some(match merged {
        Some(parents) => merge(parents, node),
        None => node,
    })
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn short(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

fn take_extends(node: &mut Node) -> Option<Member> {
    let Kind::Object(members) = &mut node.kind else {
        return None;
    };
    let at = members.iter().position(|m| m.key == "extends")?;
    Some(members.remove(at))
}

fn node_push(node: &mut Node, m: Member) {
    if let Kind::Object(members) = &mut node.kind {
        members.push(m);
    }
}

/// elizaOS's deep merge, on positioned nodes (see the module doc).
fn merge(base: Node, child: Node) -> Node {
    let Node { pos, kind, src } = child;
    let kind = match (base.kind, kind) {
        (Kind::Object(mut bm), Kind::Object(cm)) => {
            for c in cm {
                match bm.iter().position(|b| b.key == c.key) {
                    Some(i) => {
                        let b = bm.remove(i);
                        bm.insert(
                            i,
                            Member {
                                key: c.key,
                                key_pos: c.key_pos,
                                value: merge(b.value, c.value),
                            },
                        );
                    }
                    None => bm.push(c),
                }
            }
            Kind::Object(bm)
        }
        (Kind::Array(mut b), Kind::Array(c)) => {
            b.extend(c);
            Kind::Array(b)
        }
        (Kind::Array(mut b), k @ Kind::String(_)) => {
            b.push(Node {
                pos: pos.clone(),
                kind: k,
                src: src.clone(),
            });
            Kind::Array(b)
        }
        (k @ Kind::String(_), Kind::Array(c)) => {
            let mut v = vec![Node {
                pos: base.pos,
                kind: k,
                src: base.src,
            }];
            v.extend(c);
            Kind::Array(v)
        }
        (_, k) => k,
    };
    Node { pos, kind, src }
}

impl Persona {
    fn new(
        source: &Path,
        raw: serde_json::Value,
        character: Character,
        depends_on: Vec<PathBuf>,
    ) -> Self {
        let id = character
            .id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(AgentId::from)
            .unwrap_or_else(|| AgentId::new(slug(&character.name)));
        Persona {
            id,
            name: character.name.clone(),
            source: source.to_path_buf(),
            raw,
            character,
            depends_on,
        }
    }
}

/// `LP Manager` → `lp-manager`: lower-case letters and digits, other runs become one `-`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "persona".to_string()
    } else {
        out
    }
}
