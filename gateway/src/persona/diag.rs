//! Diagnostics: one problem in a character file, with its position, and the helpers that
//! word them (type names, "did you mean" suggestions).
//!
//! A diagnostic prints as `file:line:col: field.path: reason` (warnings put `warning: `
//! before the path), which editors and terminals turn into a link to the spot.

use std::path::{Path, PathBuf};

use super::Persona;
use super::json::{Node, Pos};

/// One problem found in a character file, printed as `file:line:col: field.path: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    /// The field, as an author would write it: `bio`, `messageExamples[2][0].content.text`.
    /// `(json)` for a syntax error and `(file)` for a file that cannot be read.
    pub path: String,
    pub message: String,
    pub severity: Severity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(
            f,
            "{}:{}:{}: {}{}: {}",
            self.file.display(),
            self.line,
            self.col,
            sev,
            self.path,
            self.message
        )
    }
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub(crate) fn at(
        pos: &Pos,
        path: &str,
        message: impl Into<String>,
        severity: Severity,
    ) -> Self {
        Diagnostic {
            file: pos.file.to_path_buf(),
            line: pos.line,
            col: pos.col,
            path: path.to_string(),
            message: message.into(),
            severity,
        }
    }

    /// An error on one of `persona`'s fields, at the field's position when the file has it
    /// (else at the top of the persona's file).
    pub(crate) fn at_field(persona: &Persona, field: &str, message: String) -> Self {
        let pos = persona.character.positions.get(field);
        let (line, col, file) = match pos {
            Some(Pos { line, col, file }) => (*line, *col, file.to_path_buf()),
            None => (1, 1, persona.source.clone()),
        };
        Diagnostic {
            file,
            line,
            col,
            path: field.to_string(),
            message,
            severity: Severity::Error,
        }
    }

    /// A problem with the file as a whole (unreadable, a cycle found before parsing…).
    pub(crate) fn file(file: &Path, path: &str, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_path_buf(),
            line: 1,
            col: 1,
            path: path.to_string(),
            message: message.into(),
            severity: Severity::Error,
        }
    }
}

/// Collects diagnostics while a file is read.
#[derive(Debug, Default)]
pub(crate) struct Diags {
    pub list: Vec<Diagnostic>,
}

impl Diags {
    pub fn error(&mut self, pos: &Pos, path: &str, message: impl Into<String>) {
        self.list
            .push(Diagnostic::at(pos, path, message, Severity::Error));
    }

    pub fn warn(&mut self, pos: &Pos, path: &str, message: impl Into<String>) {
        self.list
            .push(Diagnostic::at(pos, path, message, Severity::Warning));
    }

    /// `expected X, found Y` at the node.
    pub fn wrong_type(&mut self, node: &Node, path: &str, expected: &str) {
        self.error(
            &node.pos,
            path,
            format!("expected {expected}, found {}", found(node)),
        );
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(Diagnostic::is_error)
    }
}

/// How a found value is described: its kind (an empty string is called out, since it is the
/// usual placeholder left in a template file).
fn found(node: &Node) -> String {
    use super::json::Kind;
    match &node.kind {
        Kind::String(s) if s.is_empty() => "an empty string".into(),
        _ => node.describe().to_string(),
    }
}

/// The known name closest to `word`, when it is close enough to be a likely typo.
pub(crate) fn suggest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for k in known {
        let kl = k.to_ascii_lowercase();
        // Same letters in another case (`Bio`, `modelprovider`) is always a match.
        let d = if kl == w { 0 } else { levenshtein(&w, &kl) };
        // Allow about one edit per three letters, or one name containing the other at its
        // start or end (`biography` → `bio`, `examples` → `messageExamples`).
        let limit = (kl.chars().count().max(w.chars().count()) / 3).max(1);
        let (short, long) = if kl.len() <= w.len() {
            (&kl, &w)
        } else {
            (&w, &kl)
        };
        let contains = short.len() >= 3
            && (long.starts_with(short.as_str()) || long.ends_with(short.as_str()));
        if (d <= limit || contains) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// `unknown field` with a suggestion when one is near.
pub(crate) fn unknown_field_message(key: &str, known: &[&str]) -> String {
    match suggest(key, known) {
        Some(s) => format!("unknown field (did you mean \"{s}\"?); it is kept but not used"),
        None => "unknown field; it is kept but not used".to_string(),
    }
}

/// Edit distance where swapping two neighbouring letters (`stlye`) counts as one edit
/// (optimal string alignment).
fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// `parent.key` (or `key` at the top).
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let known = [
            "bio",
            "lore",
            "messageExamples",
            "adjectives",
            "modelProvider",
            "style",
        ];
        assert_eq!(suggest("biography", &known), Some("bio"));
        assert_eq!(suggest("Bio", &known), Some("bio"));
        assert_eq!(suggest("messageExample", &known), Some("messageExamples"));
        assert_eq!(suggest("adjective", &known), Some("adjectives"));
        assert_eq!(suggest("modelprovider", &known), Some("modelProvider"));
        assert_eq!(suggest("stlye", &known), Some("style"));
        assert_eq!(suggest("examples", &known), Some("messageExamples"));
        assert_eq!(suggest("people", &known), None);
    }

    #[test]
    fn display_format() {
        let d = Diagnostic {
            file: "alice.json".into(),
            line: 4,
            col: 10,
            path: "bio".into(),
            message: "expected a string or a list of strings, found a number".into(),
            severity: Severity::Error,
        };
        assert_eq!(
            d.to_string(),
            "alice.json:4:10: bio: expected a string or a list of strings, found a number"
        );
    }
}
