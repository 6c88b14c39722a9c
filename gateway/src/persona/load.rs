//! Loading: reading a character file (and the parents it `extends`) into a [`Persona`].
//!
//! `extends` follows elizaOS: each entry is a path relative to the file that names it;
//! parents are merged in order (a later parent overrides an earlier one) and the file itself
//! goes on top. Merging is elizaOS's deep merge: objects merge key by key, lists are
//! concatenated (parent items first), and any other value from the child replaces the
//! parent's. A string `bio` meeting a list `bio` counts as a one-item list. Because merging
//! happens on the positioned tree, a mistake inherited from a parent is reported in the
//! parent's file, at its line. A cycle is an error at the `extends` entry that closes it.
//!
//! Unlike elizaOS, a parent must be a `.json` file under the personas directory (see
//! `paths`), and what a character reads is bounded: each file at most [`MAX_FILE_BYTES`],
//! the file and all its parents together at most [`MAX_TOTAL_BYTES`] (a file may name the
//! same parent many times), checked before a file is read (issue 30, finding 3).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::character::{self, Character};
use super::diag::{Diagnostic, Diags};
use super::json::{self, Kind, Member, Node};
use super::paths::{LoadOptions, ParentRefused, Policy};
use super::{Loaded, Persona};
use troupe_connectors::AgentId;

/// The most a character file, or a parent it `extends`, may weigh. elizaOS's largest
/// published characters are under 100 KiB.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most one character reads in all, its parents included.
pub(crate) const MAX_TOTAL_BYTES: u64 = 4 * MAX_FILE_BYTES;

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
    let mut tree_reader = TreeReader {
        policy,
        stack: &mut stack,
        deps: &mut deps,
        left: MAX_TOTAL_BYTES,
        d: &mut d,
    };
    let tree = tree_reader.read(path);
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

/// Reads a file's text, refusing before reading when it is larger than [`MAX_FILE_BYTES`]
/// or than what is `left` of the character's allowance (and reading at most one byte more,
/// should it grow meanwhile). The error is the sentence for the diagnostic; it never holds
/// the file's content or its path.
fn read_bounded(path: &Path, left: &mut u64) -> Result<String, String> {
    use std::io::Read;
    let limit = MAX_FILE_BYTES.min(*left);
    let too_large = || {
        if limit < MAX_FILE_BYTES {
            format!(
                "this file and the parents read before it are larger than {MAX_TOTAL_BYTES} \
                 bytes, the most one character may read; it was not read"
            )
        } else {
            format!(
                "the file is larger than {MAX_FILE_BYTES} bytes, the most a character file \
                 may be; it was not read"
            )
        }
    };
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read the file: {}", e.kind()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read the file: {}", e.kind()))?;
    if !meta.is_file() {
        return Err("cannot read the file: it is not a regular file".into());
    }
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the file: {}", e.kind()))?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit {
        return Err(too_large());
    }
    *left -= read;
    String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_string())
}

/// Reads a character and its parents, under one policy and one allowance of bytes.
struct TreeReader<'a> {
    policy: &'a Policy,
    /// The files being read, for cycle detection.
    stack: &'a mut Vec<PathBuf>,
    /// Every parent file read.
    deps: &'a mut Vec<PathBuf>,
    /// Bytes the character may still read ([`MAX_TOTAL_BYTES`] at the start).
    left: u64,
    d: &'a mut Diags,
}

impl TreeReader<'_> {
    /// Reads, parses and merges `path` with its parents.
    fn read(&mut self, path: &Path) -> Option<Node> {
        let mut node = self.parse(path)?;
        let Some(ext) = take_extends(&mut node) else {
            return Some(node);
        };
        let entries: Vec<&Node> = match &ext.value.kind {
            Kind::Array(items) => items.iter().collect(),
            Kind::String(_) => vec![&ext.value],
            Kind::Null => Vec::new(),
            _ => {
                self.d
                    .wrong_type(&ext.value, "extends", "a list of file paths");
                return Some(node);
            }
        };
        self.stack.push(canonical(path));
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut merged: Option<Node> = None;
        for (i, entry) in entries.into_iter().enumerate() {
            let p = if matches!(ext.value.kind, Kind::Array(_)) {
                format!("extends[{i}]")
            } else {
                "extends".to_string()
            };
            if let Some(mut parent_tree) = self.parent(entry, &p, dir) {
                // The parent's own `extends` was followed already; it is not inherited.
                take_extends(&mut parent_tree);
                merged = Some(match merged {
                    Some(m) => merge(m, parent_tree),
                    None => parent_tree,
                });
            }
        }
        self.stack.pop();
        // The `extends` entry itself stays on the child, so `raw` shows what was written.
        node_push(&mut node, ext);
        Some(match merged {
            Some(parents) => merge(parents, node),
            None => node,
        })
    }

    /// Reads and parses one file (within the allowance), warning about keys written twice.
    fn parse(&mut self, path: &Path) -> Option<Node> {
        let text = match read_bounded(path, &mut self.left) {
            Ok(t) => t,
            Err(message) => {
                self.d.list.push(Diagnostic::file(path, "(file)", message));
                return None;
            }
        };
        let file: Arc<Path> = Arc::from(path);
        let (node, dups) = match json::parse(&text, file) {
            Ok(x) => x,
            Err(e) => {
                self.d.list.push(Diagnostic {
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
        drop(text);
        for dup in dups {
            self.d.warn(
                &dup.pos,
                &dup.key,
                "this field appears again later in the same object; the later value is used",
            );
        }
        Some(node)
    }

    /// The parent that one `extends` entry (at `p`, in a file of directory `dir`) names,
    /// read with its own parents; `None` (reported) when the entry is not a path, the
    /// policy refuses it, or it closes a cycle.
    fn parent(&mut self, entry: &Node, p: &str, dir: &Path) -> Option<Node> {
        let Some(rel) = entry.as_str() else {
            self.d.wrong_type(entry, p, "a file path (a string)");
            return None;
        };
        let canon = match self.policy.parent(rel, dir) {
            Ok(c) => c,
            Err(why) => {
                self.d.error(&entry.pos, p, refusal(rel, &why));
                return None;
            }
        };
        if let Some(at) = self.stack.iter().position(|s| *s == canon) {
            let chain: Vec<String> = self.stack[at..]
                .iter()
                .chain(std::iter::once(&canon))
                .map(|s| short(s))
                .collect();
            self.d.error(
                &entry.pos,
                p,
                format!("extends cycle: {}", chain.join(" → ")),
            );
            return None;
        }
        if !self.deps.contains(&canon) {
            self.deps.push(canon.clone());
        }
        self.read(&canon)
    }
}

/// The sentence for a refused `extends` entry: the entry as written (cut short, and left
/// out when absolute), and why.
fn refusal(written: &str, why: &ParentRefused) -> String {
    if *why == ParentRefused::Absolute {
        return format!("the parent file {why}");
    }
    let mut shown: String = written.chars().take(80).collect();
    if shown.len() < written.len() {
        shown.push('…');
    }
    format!("parent file \"{shown}\" {why}")
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
        let prepared = std::sync::Arc::new(super::prepared::Prepared::new(&id, &character));
        Persona {
            id,
            prepared,
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
