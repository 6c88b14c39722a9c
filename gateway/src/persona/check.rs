//! `troupe check`: every file's own diagnostics, the credentials a file may not use where it
//! sends them (its own endpoint with the operator's key, see `secrets`), and the problems
//! only visible across files: two personas with the same id, and two personas claiming the
//! same bot account (the same platform token) on a platform.

use std::path::{Path, PathBuf};

use troupe_connectors::Platform;

use super::diag::Diagnostic;
use super::paths::{LoadOptions, Policy};
use super::secrets::{self, SecretSource};
use super::{Env, Loaded, Persona};

/// The outcome of checking a set of files.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Errors and warnings, file by file in the order given, by position within a file.
    pub diagnostics: Vec<Diagnostic>,
    /// The personas that loaded (they may still have cross-file errors above).
    pub loaded: Vec<Loaded>,
}

impl CheckReport {
    /// True when there is no error (warnings are fine).
    pub fn ok(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }

    #[cfg(test)]
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }
}

/// Checks character files. A directory in `paths` stands for the `*.json` files in it. A
/// `knowledge` path that leads outside the file's directory and `options.knowledge_roots`
/// is an error here (loading only skips it).
pub fn check_files(paths: &[PathBuf], env: &Env, options: &LoadOptions) -> CheckReport {
    let mut report = CheckReport::default();
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            match super::load::persona_files(p) {
                Ok(list) => files.extend(list),
                Err(e) => report.diagnostics.push(Diagnostic::file(
                    p,
                    "(dir)",
                    format!("cannot read the directory: {e}"),
                )),
            }
        } else {
            files.push(p.clone());
        }
    }
    for f in &files {
        match super::load::load(f, &Policy::new(f, options, true)) {
            Ok(l) => {
                report.diagnostics.extend(l.warnings.iter().cloned());
                report.diagnostics.extend(withheld(&l.persona, env));
                report
                    .diagnostics
                    .extend(super::accounts::account_warnings(&l.persona, env));
                report.loaded.push(l);
            }
            Err(d) => report.diagnostics.extend(d),
        }
    }
    let personas: Vec<&Persona> = report.loaded.iter().map(|l| &l.persona).collect();
    let cross = conflicts(&personas, env);
    report.diagnostics.extend(cross);
    // Keep each file's lines together, in the order the files were given.
    let order = |file: &Path| files.iter().position(|f| f == file).unwrap_or(usize::MAX);
    report.diagnostics.sort_by(|a, b| {
        (order(&a.file), &a.file, a.line, a.col, a.severity).cmp(&(
            order(&b.file),
            &b.file,
            b.line,
            b.col,
            b.severity,
        ))
    });
    report
}

/// An error for each credential the file's own endpoint may not receive (issue 30,
/// finding 1): at the endpoint's field, naming both keys.
pub(crate) fn withheld(persona: &Persona, env: &Env) -> Vec<Diagnostic> {
    persona
        .withheld(None, env)
        .into_iter()
        .map(|w| Diagnostic::at_field(persona, &w.field(), w.message()))
        .collect()
}

/// Cross-file errors among `personas`: a duplicate id, or a platform token used by two.
/// Each error sits in one file and names the other, and both files get one.
pub(crate) fn conflicts(personas: &[&Persona], env: &Env) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, a) in personas.iter().enumerate() {
        for b in personas.iter().skip(i + 1) {
            out.extend(pair_conflicts(a, b, env));
            out.extend(pair_conflicts(b, a, env));
        }
    }
    out
}

/// The cross-file errors that `persona` has with any of `others` (only those on `persona`).
pub(crate) fn conflicts_of(persona: &Persona, others: &[&Persona], env: &Env) -> Vec<Diagnostic> {
    others
        .iter()
        .filter(|o| o.source != persona.source)
        .flat_map(|o| pair_conflicts(persona, o, env))
        .collect()
}

/// Errors on `a` caused by `b`.
fn pair_conflicts(a: &Persona, b: &Persona, env: &Env) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if a.id == b.id {
        out.push(super::load::duplicate_id(a, b));
    }
    out.extend(shared_tokens(a, b, env));
    out.extend(super::accounts::shared_account_tokens(a, b, env));
    out
}

/// Errors on `a` for every platform where `a` and `b` would log in with the same token.
fn shared_tokens(a: &Persona, b: &Persona, env: &Env) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let pb = b.platforms();
    for platform in a.platforms() {
        if !pb.contains(&platform) {
            continue;
        }
        let Some(key) = secrets::token_key(platform) else {
            continue;
        };
        // A persona with Telegram accounts logs in with those (`shared_account_tokens`).
        if platform == Platform::Telegram
            && (a.telegram_accounts(env).is_some() || b.telegram_accounts(env).is_some())
        {
            continue;
        }
        let (Some((ta, sa)), Some((tb, _))) =
            (secrets::lookup(a, key, env), secrets::lookup(b, key, env))
        else {
            continue;
        };
        if ta == tb && !a.may_share_bot_with(b, platform) {
            out.push(token_error(a, &sa, b, platform, key));
        }
    }
    out
}

fn token_error(
    persona: &Persona,
    source: &SecretSource,
    other: &Persona,
    platform: Platform,
    key: &str,
) -> Diagnostic {
    let mut message = format!(
        "{platform} token ({}) is the same as the one {} uses; one bot account can serve one persona: \
         give each its own {key} in settings.secrets or CHARACTER.{}.{key}",
        source.describe(key),
        other.source.display(),
        secrets::env_name(persona.id.as_str()),
    );
    message.push_str(super::accounts::share_hint(platform));
    match source.field(key) {
        Some(field) => Diagnostic::at_field(persona, &field, message),
        None => {
            // The token came from the environment: point at where the persona claims the
            // platform.
            let field = ["clients", "plugins", "settings"]
                .into_iter()
                .find(|f| persona.character.positions.contains_key(*f))
                .unwrap_or("name");
            let mut d = Diagnostic::at_field(persona, field, message);
            d.path = format!("{field} ({platform})");
            d
        }
    }
}
