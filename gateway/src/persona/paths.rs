//! Where the files a character pulls in may be: its `knowledge` files and directories
//! under the personas directory or under a directory the operator allows, and the parents
//! it `extends` under the personas directory only.
//!
//! The personas directory is the one the character file was loaded from (`TROUPE_PERSONAS`
//! when troupe runs; the file's own directory for `troupe check FILE`). A `knowledge` path is
//! resolved (symlinks included) and must land under it, or under one of the
//! `TROUPE_KNOWLEDGE_ALLOW_PATHS` directories. So an absolute path, a `..` that climbs out,
//! and a symlink that points out are all refused, unless what they reach is allowed.
//!
//! A refused entry is an error for `troupe check`, like any mistake in the file, and a
//! warning when troupe loads the persona: the persona runs without that entry, so a policy
//! refusal never takes a persona down.
//!
//! `extends` is stricter (issue 30, finding 3): a parent is read inside the gateway and
//! merged into the persona, and `POST /api/characters/check` shows what went wrong with
//! it to whoever called, so a parent must be a `.json` file under the personas directory,
//! written relative to the file naming it, and a refusal is always an error. Its message
//! names the entry as written (never an absolute path, never where it resolves to), and
//! the checks that need no file system come first, so a refusal does not tell whether a
//! file outside exists.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Why an `extends` entry is refused. Its message never holds a path beyond the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParentRefused {
    /// Written as an absolute path (or from the root).
    Absolute,
    /// Climbs out of the personas directory with `..`.
    ClimbsOut,
    /// Not named `*.json`.
    NotJson,
    /// Nothing there (or not a regular file).
    NotFound,
    /// A symlink (itself or a directory on the way) leads out of the personas directory.
    Symlink,
}

impl fmt::Display for ParentRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParentRefused::Absolute => {
                "is an absolute path; a parent is written relative to the file that names it, \
                 and stays under the personas directory"
            }
            ParentRefused::ClimbsOut => {
                "climbs out of the personas directory with `..`; parents stay under the \
                 personas directory (put shared parents in a subdirectory of it)"
            }
            ParentRefused::NotJson => "is not a `.json` file; a parent is a character file",
            ParentRefused::NotFound => "was not found under the personas directory",
            ParentRefused::Symlink => {
                "is reached through a symlink that leads outside the personas directory; \
                 parents stay under the personas directory"
            }
        })
    }
}

/// `a/b/../c` → `a/c`, without the file system; `None` when `..` climbs above the root.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// How character files are loaded, beyond the file itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Directories, besides the personas directory, that `knowledge` paths may point into
    /// (`TROUPE_KNOWLEDGE_ALLOW_PATHS`). Relative ones are taken from the working directory.
    pub knowledge_roots: Vec<PathBuf>,
}

/// The roots for one load, resolved once.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// The personas directory, resolved.
    personas: PathBuf,
    /// The allowed extra directories that exist, resolved.
    extra: Vec<PathBuf>,
    /// `troupe check`: a refusal is an error rather than a warning.
    pub strict: bool,
}

/// Why a found `knowledge` path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Written as an absolute path.
    Absolute,
    /// Climbs out with `..`.
    ParentDir,
    /// Found only relative to the working directory, which is outside.
    WorkingDir,
    /// A symlink (itself or a directory on the way) points out.
    Symlink,
}

fn resolve(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Policy {
    /// `character_file` is the top-level file being loaded (not a parent it `extends`): its
    /// directory is the personas directory.
    pub(crate) fn new(character_file: &Path, options: &LoadOptions, strict: bool) -> Self {
        let dir = match character_file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Policy {
            personas: resolve(dir),
            extra: options
                .knowledge_roots
                .iter()
                .filter_map(|r| std::fs::canonicalize(r).ok())
                .collect(),
            strict,
        }
    }

    fn allows(&self, resolved: &Path) -> bool {
        resolved.starts_with(&self.personas) || self.extra.iter().any(|r| resolved.starts_with(r))
    }

    /// Checks a path that exists (`found`, tried for the entry written as `written`):
    /// its resolved form when allowed.
    pub(crate) fn check(
        &self,
        written: &str,
        found: &Path,
        from_cwd: bool,
    ) -> Result<PathBuf, Refused> {
        let resolved = resolve(found);
        if self.allows(&resolved) {
            return Ok(resolved);
        }
        let w = Path::new(written);
        Err(if w.is_absolute() || w.has_root() {
            Refused::Absolute
        } else if w.components().any(|c| c == Component::ParentDir) {
            Refused::ParentDir
        } else if from_cwd {
            Refused::WorkingDir
        } else {
            Refused::Symlink
        })
    }

    /// The file an `extends` entry written as `written`, in a file of directory `dir`,
    /// names: resolved, when it is a `.json` file under the personas directory.
    pub(crate) fn parent(&self, written: &str, dir: &Path) -> Result<PathBuf, ParentRefused> {
        let w = Path::new(written);
        if w.is_absolute()
            || w.has_root()
            || w.components().any(|c| matches!(c, Component::Prefix(_)))
        {
            return Err(ParentRefused::Absolute);
        }
        // First without the file system, so a refusal says nothing about what is outside.
        let lexical = lexical(&resolve(dir).join(w)).ok_or(ParentRefused::ClimbsOut)?;
        if !lexical.starts_with(&self.personas) {
            return Err(ParentRefused::ClimbsOut);
        }
        if lexical.extension().is_none_or(|e| e != "json") {
            return Err(ParentRefused::NotJson);
        }
        let resolved = std::fs::canonicalize(&lexical).map_err(|_| ParentRefused::NotFound)?;
        if !resolved.starts_with(&self.personas) {
            return Err(ParentRefused::Symlink);
        }
        if !resolved.is_file() {
            return Err(ParentRefused::NotFound);
        }
        Ok(resolved)
    }

    /// The sentence for a refusal of the `what` ("file", "directory") written as `written`.
    /// It names neither the personas directory nor where the entry resolves to: the
    /// console shows it to whoever checks a draft (issue 30, finding 3).
    pub(crate) fn message(&self, what: &str, written: &str, why: &Refused) -> String {
        let how = match why {
            Refused::Absolute => {
                format!("{what} \"{written}\" is an absolute path outside the personas directory")
            }
            Refused::ParentDir => {
                format!("{what} \"{written}\" climbs out of the personas directory with `..`")
            }
            Refused::WorkingDir => format!(
                "{what} \"{written}\" was found only in the working directory, outside the \
                 personas directory"
            ),
            Refused::Symlink => format!(
                "{what} \"{written}\" is reached through a symlink that leads outside the \
                 personas directory"
            ),
        };
        let then = if self.strict {
            ""
        } else {
            "; the entry is skipped"
        };
        format!(
            "{how}: knowledge paths stay under the personas directory unless \
             TROUPE_KNOWLEDGE_ALLOW_PATHS names the directory they are in{then}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_personas_directory_are_allowed() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("docs")).unwrap();
        std::fs::write(t.path().join("docs/a.md"), "a").unwrap();
        let p = Policy::new(&t.path().join("x.json"), &LoadOptions::default(), true);
        let root = resolve(t.path());
        let found = t.path().join("docs/a.md");
        assert_eq!(
            p.check("docs/a.md", &found, false),
            Ok(root.join("docs/a.md"))
        );
        // `..` that stays inside is fine.
        let back = t.path().join("docs/../docs/a.md");
        assert_eq!(
            p.check("docs/../docs/a.md", &back, false),
            Ok(root.join("docs/a.md"))
        );
    }

    #[test]
    fn escapes_are_refused_and_named() {
        let t = tempfile::tempdir().unwrap();
        let personas = t.path().join("personas");
        std::fs::create_dir_all(&personas).unwrap();
        std::fs::write(t.path().join("secret.txt"), "s").unwrap();
        let p = Policy::new(&personas.join("x.json"), &LoadOptions::default(), false);
        let up = personas.join("../secret.txt");
        let why = p.check("../secret.txt", &up, false).unwrap_err();
        assert!(matches!(why, Refused::ParentDir), "{why:?}");
        assert!(
            p.message("file", "../secret.txt", &why)
                .ends_with("the entry is skipped")
        );
        let abs = t.path().join("secret.txt");
        let written = abs.display().to_string();
        let why = p.check(&written, &abs, false).unwrap_err();
        assert!(matches!(why, Refused::Absolute), "{why:?}");
        let why = p.check("secret.txt", &abs, true).unwrap_err();
        assert!(matches!(why, Refused::WorkingDir), "{why:?}");
    }

    #[test]
    fn an_allowed_root_lets_a_path_in() {
        let t = tempfile::tempdir().unwrap();
        let personas = t.path().join("personas");
        let shared = t.path().join("shared");
        std::fs::create_dir_all(&personas).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("faq.md"), "q").unwrap();
        let options = LoadOptions {
            knowledge_roots: vec![shared.clone(), t.path().join("missing")],
        };
        let p = Policy::new(&personas.join("x.json"), &options, true);
        let found = personas.join("../shared/faq.md");
        assert_eq!(
            p.check("../shared/faq.md", &found, false),
            Ok(resolve(&shared).join("faq.md"))
        );
    }
}
