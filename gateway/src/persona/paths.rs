//! Where a character's `knowledge` files and directories may be: under the personas
//! directory, or under a directory the operator allows.
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

use std::path::{Component, Path, PathBuf};

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

/// Why a found `knowledge` path is refused. `resolved` is where it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Written as an absolute path.
    Absolute { resolved: PathBuf },
    /// Climbs out with `..`.
    ParentDir { resolved: PathBuf },
    /// Found only relative to the working directory, which is outside.
    WorkingDir { resolved: PathBuf },
    /// A symlink (itself or a directory on the way) points out.
    Symlink { resolved: PathBuf },
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
            Refused::Absolute { resolved }
        } else if w.components().any(|c| c == Component::ParentDir) {
            Refused::ParentDir { resolved }
        } else if from_cwd {
            Refused::WorkingDir { resolved }
        } else {
            Refused::Symlink { resolved }
        })
    }

    /// The sentence for a refusal of the `what` ("file", "directory") written as `written`.
    pub(crate) fn message(&self, what: &str, written: &str, why: &Refused) -> String {
        let personas = self.personas.display();
        let how = match why {
            Refused::Absolute { resolved } => format!(
                "{what} \"{written}\" is an absolute path outside the personas directory \
                 {personas} (it resolves to {})",
                resolved.display()
            ),
            Refused::ParentDir { resolved } => format!(
                "{what} \"{written}\" climbs out of the personas directory {personas} with `..` \
                 (it resolves to {})",
                resolved.display()
            ),
            Refused::WorkingDir { resolved } => format!(
                "{what} \"{written}\" was found only in the working directory, at {}, outside the \
                 personas directory {personas}",
                resolved.display()
            ),
            Refused::Symlink { resolved } => format!(
                "{what} \"{written}\" is reached through a symlink that leads outside the \
                 personas directory {personas}, to {}",
                resolved.display()
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
        assert!(matches!(why, Refused::ParentDir { .. }), "{why:?}");
        assert!(
            p.message("file", "../secret.txt", &why)
                .ends_with("the entry is skipped")
        );
        let abs = t.path().join("secret.txt");
        let written = abs.display().to_string();
        let why = p.check(&written, &abs, false).unwrap_err();
        assert!(matches!(why, Refused::Absolute { .. }), "{why:?}");
        let why = p.check("secret.txt", &abs, true).unwrap_err();
        assert!(matches!(why, Refused::WorkingDir { .. }), "{why:?}");
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
