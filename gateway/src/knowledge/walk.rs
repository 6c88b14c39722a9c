//! Walking a knowledge directory: which files under it are read, and the limits that keep a
//! walk inside it and finite.
//!
//! A walk never leaves the directory it was given: a symlink (to a file or a directory) whose
//! target resolves outside is skipped with a warning. Each directory is entered once, by its
//! canonical path, so a symlink back to an ancestor ends instead of looping. A walk stops at
//! [`MAX_FILES`] files and does not descend below [`MAX_DEPTH`] levels. Only regular files
//! are returned: a FIFO or a device would block or never end when read.
//!
//! Whether the directory itself may be read (a character's `knowledge` entries stay under
//! the personas directory) is decided before, by `persona`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The most files one walk returns.
pub(crate) const MAX_FILES: usize = 10_000;
/// The deepest level a walk descends to (the directory given is level 0).
pub(crate) const MAX_DEPTH: usize = 32;

/// Every regular file under `dir`, recursively, in name order, skipping hidden entries
/// (`.git`, `.DS_Store`) and anything that resolves outside `dir`. A path that is a file is
/// returned as is.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    walk(dir, MAX_FILES, MAX_DEPTH)
}

fn walk(start: &Path, max_files: usize, max_depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    match std::fs::metadata(start) {
        Ok(m) if m.is_file() => return vec![start.to_path_buf()],
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            tracing::warn!(path = %start.display(), "not a regular file or a directory; skipped");
            return out;
        }
        Err(e) => {
            tracing::warn!(path = %start.display(), error = %e, "cannot read the path");
            return out;
        }
    }
    let Ok(root) = std::fs::canonicalize(start) else {
        tracing::warn!(path = %start.display(), "cannot resolve the directory");
        return out;
    };
    let mut visited: HashSet<PathBuf> = HashSet::new();
    let mut stack = vec![(start.to_path_buf(), 0usize)];
    while let Some((path, depth)) = stack.pop() {
        let Some(canonical) = resolved_inside(&path, &root) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&canonical) else {
            continue;
        };
        if meta.is_file() {
            if out.len() >= max_files {
                tracing::warn!(
                    root = %root.display(),
                    max_files,
                    "the knowledge directory holds more files than one walk reads; the rest are skipped"
                );
                break;
            }
            out.push(path);
            continue;
        }
        if !meta.is_dir() {
            tracing::debug!(path = %path.display(), "not a regular file; skipped");
            continue;
        }
        if !visited.insert(canonical) {
            tracing::debug!(path = %path.display(), "directory already walked (a symlink loop?); skipped");
            continue;
        }
        if depth >= max_depth {
            tracing::warn!(path = %path.display(), max_depth, "too deep below the knowledge directory; skipped");
            continue;
        }
        // Reversed onto the stack, so they come off in name order.
        let children = children(&path);
        stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    out
}

/// `path` resolved (symlinks followed), when it stays under `root`; else `None`, with a
/// warning.
fn resolved_inside(path: &Path, root: &Path) -> Option<PathBuf> {
    let Ok(canonical) = std::fs::canonicalize(path) else {
        tracing::warn!(path = %path.display(), "cannot resolve the path (a broken symlink?); skipped");
        return None;
    };
    if !canonical.starts_with(root) {
        tracing::warn!(
            path = %path.display(),
            target = %canonical.display(),
            root = %root.display(),
            "a symlink that leads outside the knowledge directory; skipped"
        );
        return None;
    }
    Some(canonical)
}

/// The entries of the directory `path` that are not hidden, in name order; none (with a
/// warning) when it cannot be read.
fn children(path: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the directory");
            return Vec::new();
        }
    };
    let mut children: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    children.sort();
    children
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, rel).unwrap();
    }

    fn names(root: &Path, files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn files_in_name_order_without_hidden_ones() {
        let t = tempfile::tempdir().unwrap();
        for f in ["b.md", "a/z.md", "a/b/c.md", ".git/config", "a/.DS_Store"] {
            write(t.path(), f);
        }
        assert_eq!(
            names(t.path(), &files_under(t.path())),
            ["a/b/c.md", "a/z.md", "b.md"]
        );
        let one = t.path().join("b.md");
        assert_eq!(files_under(&one), [one]);
        assert!(files_under(&t.path().join("missing")).is_empty());
    }

    #[test]
    fn a_walk_stops_at_its_caps() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(t.path(), &format!("f{i}.md"));
        }
        write(t.path(), "1/2/3/deep.md");
        write(t.path(), "1/shallow.md");
        assert_eq!(walk(t.path(), 3, MAX_DEPTH).len(), 3);
        // Depth 2 reads `1/` (level 1) but not `1/2/` (level 2) and below.
        let files = names(t.path(), &walk(t.path(), MAX_FILES, 2));
        assert!(files.contains(&"1/shallow.md".to_string()), "{files:?}");
        assert!(!files.iter().any(|f| f.contains("deep")), "{files:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_cycle_ends() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "docs/a.md");
        write(t.path(), "docs/sub/b.md");
        symlink(t.path().join("docs"), t.path().join("docs/sub/loop")).unwrap();
        symlink(t.path().join("docs/sub"), t.path().join("docs/sub/self")).unwrap();
        let files = names(t.path(), &files_under(&t.path().join("docs")));
        assert_eq!(files, ["docs/a.md", "docs/sub/b.md"]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_directory_are_not_followed() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt");
        write(outside.path(), "more/secret2.txt");
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "ok.md");
        symlink(
            outside.path().join("secret.txt"),
            t.path().join("file-link"),
        )
        .unwrap();
        symlink(outside.path().join("more"), t.path().join("dir-link")).unwrap();
        symlink("/etc", t.path().join("etc")).unwrap();
        symlink(t.path().join("nowhere"), t.path().join("broken")).unwrap();
        // A link that stays inside is fine.
        symlink(t.path().join("ok.md"), t.path().join("inside-link")).unwrap();
        let files = names(t.path(), &files_under(t.path()));
        assert_eq!(files, ["inside-link", "ok.md"]);
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_returned() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "ok.md");
        let fifo = t.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return;
        }
        assert_eq!(names(t.path(), &files_under(t.path())), ["ok.md"]);
    }
}
