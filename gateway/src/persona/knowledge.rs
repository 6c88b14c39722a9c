//! A character's `knowledge` entries (elizaOS 2.x: `documents`, with `knowledge` as its
//! alias): inline text, and `{ "path" }` / `{ "directory" }` entries resolved at load time to
//! a location that exists and that the paths policy allows. Both entry shapes are read: the
//! 1.x one above, and 2.x's `{ "item": { "case": "path" | "directory", "value": … } }`
//! (the protobuf JSON of its `DocumentSourceItem`). This is the one place where reading a
//! character touches the file system.

use std::path::{Path, PathBuf};

use super::diag::{Diags, join, unknown_field_message};
use super::json::{Kind, Member, Node};
use super::paths::{Policy, Refused};
use super::values::{boolean, string};

/// A `knowledge` entry. Paths are resolved at load time to the location that exists, with
/// symlinks resolved, and are under the personas directory or an allowed root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnowledgeEntry {
    Text(String),
    File { path: PathBuf, shared: bool },
    Directory { path: PathBuf, shared: bool },
}

/// Knowledge entries. `{path}` and `{directory}` are looked up, in order: next to the file
/// that names them, in a `knowledge/` folder next to it (where elizaOS v0 keeps them), then
/// relative to the working directory (as elizaOS does). The first one found that `policy`
/// allows is taken; when every one found is refused, the first refusal is reported (an error
/// for `troupe check`, a warning that skips the entry when loading).
/// `field` is the key the list was written under (`knowledge` or `documents`).
pub(super) fn entries(
    v: &Node,
    field: &str,
    cwd: &Path,
    policy: &Policy,
    d: &mut Diags,
) -> Vec<KnowledgeEntry> {
    let Kind::Array(items) = &v.kind else {
        d.wrong_type(
            v,
            field,
            "a list of strings, { \"path\": … } or { \"directory\": … }",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{field}[{i}]");
        match &item.kind {
            Kind::String(s) => out.push(KnowledgeEntry::Text(s.clone())),
            Kind::Object(_) if item.get("item").is_some() => {
                out.extend(item_entry(item, &path, cwd, policy, d))
            }
            Kind::Object(members) => out.extend(located(item, members, &path, cwd, policy, d)),
            _ => d.wrong_type(
                item,
                &path,
                "a string, { \"path\": … } or { \"directory\": … }",
            ),
        }
    }
    out
}

/// A `{ "path": … }` or `{ "directory": … }` entry at `path`, found; `None` (reported) when
/// it is malformed, not found, or found only where `policy` refuses.
fn located(
    item: &Node,
    members: &[Member],
    path: &str,
    cwd: &Path,
    policy: &Policy,
    d: &mut Diags,
) -> Option<KnowledgeEntry> {
    let (target, shared) = target(members, path, d);
    let Some((kind, node)) = target else {
        d.error(
            &item.pos,
            path,
            "expected { \"path\": \"file\" } or { \"directory\": \"folder\" }",
        );
        return None;
    };
    let p = join(path, kind);
    locate(node, kind == "directory", shared, &p, cwd, policy, d)
}

/// A 2.x entry: `{ "item": { "case": "path", "value": "file" } }` or
/// `{ "item": { "case": "directory", "value": { "path": "folder", "shared": true } } }`
/// (2.x's `DocumentDirectory` also spells its path `directory`).
fn item_entry(
    entry: &Node,
    path: &str,
    cwd: &Path,
    policy: &Policy,
    d: &mut Diags,
) -> Option<KnowledgeEntry> {
    let item = entry.get("item")?;
    let ip = join(path, "item");
    let case = item.get("case").and_then(Node::as_str);
    let value = item.get("value");
    let vp = join(&ip, "value");
    match (case, value) {
        (Some("path"), Some(v)) => locate(v, false, false, &vp, cwd, policy, d),
        (Some("directory"), Some(v)) if v.members().is_some() => {
            let shared = v
                .get("shared")
                .and_then(|s| boolean(s, &join(&vp, "shared"), d))
                .unwrap_or(false);
            let (key, node) = ["path", "directory"]
                .into_iter()
                .find_map(|k| v.get(k).map(|n| (k, n)))
                .or_else(|| {
                    d.error(&v.pos, &vp, "expected { \"path\": \"folder\" }");
                    None
                })?;
            locate(node, true, shared, &join(&vp, key), cwd, policy, d)
        }
        // An empty item (`case` unset) is what 2.x writes for "no source": nothing to load.
        (None, None) if item.members().is_some_and(<[Member]>::is_empty) => None,
        _ => {
            d.error(
                &item.pos,
                &ip,
                "expected { \"case\": \"path\", \"value\": \"file\" } or { \"case\": \"directory\", \"value\": { \"path\": \"folder\" } }",
            );
            None
        }
    }
}

/// Finds the file or directory `node` names (reported at `p` when it cannot be used).
fn locate(
    node: &Node,
    want_dir: bool,
    shared: bool,
    p: &str,
    cwd: &Path,
    policy: &Policy,
    d: &mut Diags,
) -> Option<KnowledgeEntry> {
    let rel = string(node, p, d)?;
    let what = if want_dir { "directory" } else { "file" };
    let base = node.pos.file.parent().unwrap_or(Path::new("."));
    let candidates = [
        base.join(&rel),
        base.join("knowledge").join(&rel),
        cwd.join(&rel),
    ];
    match first_allowed(&candidates, &rel, want_dir, policy) {
        Ok(f) if want_dir => return Some(KnowledgeEntry::Directory { path: f, shared }),
        Ok(f) => return Some(KnowledgeEntry::File { path: f, shared }),
        Err(Some(why)) => {
            let message = policy.message(what, &rel, &why);
            if policy.strict {
                d.error(&node.pos, p, message);
            } else {
                d.warn(&node.pos, p, message);
            }
        }
        Err(None) => {
            // Where it looked, without absolute paths: the console shows this to whoever
            // checks a draft (issue 30, finding 3).
            d.error(
                &node.pos,
                p,
                format!(
                    "{what} \"{rel}\" not found (looked next to the character file, in its \
                     knowledge/ directory, and in the working directory)"
                ),
            );
        }
    }
    None
}

/// The entry's `"path"` or `"directory"` member (the key and its value) and its `shared`
/// flag; a second target and unknown keys are reported.
fn target<'a>(
    members: &'a [Member],
    path: &str,
    d: &mut Diags,
) -> (Option<(&'a str, &'a Node)>, bool) {
    let mut shared = false;
    let mut target: Option<(&str, &Node)> = None;
    for m in members {
        let p = join(path, &m.key);
        match m.key.as_str() {
            "path" | "directory" => {
                if let Some((other, _)) = target {
                    d.error(
                        &m.key_pos,
                        &p,
                        format!("an entry has either \"path\" or \"directory\", not both (\"{other}\" is already set)"),
                    );
                } else {
                    target = Some((m.key.as_str(), &m.value));
                }
            }
            "shared" => shared = boolean(&m.value, &p, d).unwrap_or(false),
            other => d.warn(
                &m.key_pos,
                &p,
                unknown_field_message(other, &["path", "directory", "shared"]),
            ),
        }
    }
    (target, shared)
}

/// The first candidate that exists (as a directory or a file, as wanted) and that `policy`
/// allows, resolved; else the first refusal, or `None` when no candidate exists. The last
/// candidate is the working directory's.
fn first_allowed(
    candidates: &[PathBuf],
    rel: &str,
    want_dir: bool,
    policy: &Policy,
) -> Result<PathBuf, Option<Refused>> {
    let mut refused = None;
    for (n, c) in candidates.iter().enumerate() {
        if !(if want_dir { c.is_dir() } else { c.is_file() }) {
            continue;
        }
        match policy.check(rel, c, n == candidates.len() - 1) {
            Ok(resolved) => return Ok(resolved),
            Err(why) => {
                refused.get_or_insert(why);
            }
        }
    }
    Err(refused)
}
