//! `/api/characters`: the character files in the personas directory, for the console's
//! editor. List them, read one, check a draft with the same checker as `troupe check`, and
//! save one: atomically (a temporary file in the same directory, then a rename), so the
//! hot-reload watcher never sees half a file, and it picks the new version up as it does an
//! editor's save.
//!
//! The file name is the only path a caller gives, and it is guarded: one plain name
//! (`[A-Za-z0-9][A-Za-z0-9._-]*.json`, at most 100 bytes), no directory, no `..`, no
//! dot-file; an existing file that is a symlink is refused, so nothing outside the
//! personas directory is read or written. A draft is checked from a dot-file next to the
//! real one (`extends` and `knowledge` resolve as they will after saving; the watcher
//! skips dot-files), which is removed again.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::path::{Path as FsPath, PathBuf};

use troupe_connectors::AgentId;

use super::AppState;
use super::error::{ApiError, ApiJson};
use crate::persona::{Diagnostic, Severity};

/// The largest character file the console reads or writes.
const MAX_FILE_BYTES: usize = 512 * 1024;

/// The errors a refused save names in its message (the check answers all of them).
const MAX_ERRORS_SHOWN: usize = 10;

/// A caller's file name, checked: a plain `*.json` name in the personas directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileName(String);

impl FileName {
    pub fn parse(raw: &str) -> Result<FileName, ApiError> {
        let ok = raw.len() <= 100
            && raw.ends_with(".json")
            && raw.len() > ".json".len()
            && raw
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && !raw.contains("..");
        if ok {
            Ok(FileName(raw.to_string()))
        } else {
            Err(ApiError::bad_request(format!(
                "`{}` is not a character file name: one plain name ending in .json, made of \
                 letters, digits, `.`, `_` and `-`, starting with a letter or digit",
                raw.chars().take(100).collect::<String>()
            )))
        }
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

/// The personas directory, and a file in it that is not a symlink.
fn resolve(state: &AppState, name: &FileName) -> Result<PathBuf, ApiError> {
    let path = state.config.personas_dir.join(name.as_str());
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && !meta.is_file()
    {
        return Err(ApiError::bad_request(format!(
            "`{}` is not a regular file (a symlink or a directory); edit it on disk",
            name.as_str()
        )));
    }
    Ok(path)
}

/// A content revision, to tell whether the file on disk changed under the editor.
fn revision(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    format!("{:016x}", h.finish())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CharacterFile {
    file: String,
    /// The persona loaded from it, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_id: Option<AgentId>,
}

#[derive(Debug, Serialize)]
pub struct CharacterList {
    files: Vec<CharacterFile>,
}

/// `GET /api/characters`.
pub async fn list(State(state): State<AppState>) -> Result<Json<CharacterList>, ApiError> {
    let dir = state.config.personas_dir.clone();
    let paths = tokio::task::spawn_blocking(move || crate::persona::persona_files(&dir))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| ApiError::internal(format!("cannot read the personas directory: {e}")))?;
    let agents = state.agents.all();
    let files = paths
        .iter()
        .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().to_string()))
        .map(|file| CharacterFile {
            agent_id: agents
                .iter()
                .find(|a| {
                    a.mind()
                        .persona
                        .source
                        .file_name()
                        .is_some_and(|f| f.to_string_lossy() == file)
                })
                .map(|a| a.id.clone()),
            file,
        })
        .collect();
    Ok(Json(CharacterList { files }))
}

#[derive(Debug, Serialize)]
pub struct FileText {
    file: String,
    text: String,
    revision: String,
}

/// `GET /api/characters/{file}`.
pub async fn read(
    State(state): State<AppState>,
    Path(file): Path<String>,
) -> Result<Json<FileText>, ApiError> {
    let name = FileName::parse(&file)?;
    let path = resolve(&state, &name)?;
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) if bytes.len() > MAX_FILE_BYTES => {
            return Err(ApiError::bad_request(format!(
                "`{file}` is larger than {MAX_FILE_BYTES} bytes; edit it on disk"
            )));
        }
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| ApiError::bad_request(format!("`{file}` is not UTF-8")))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::not_found(format!("no character file `{file}`")));
        }
        Err(e) => return Err(ApiError::internal(format!("cannot read `{file}`: {e}"))),
    };
    Ok(Json(FileText {
        file: name.0,
        revision: revision(&text),
        text,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Draft {
    file: String,
    text: String,
    /// Saving: the revision the editor started from; the save is refused (409) when the
    /// file on disk has changed since. Absent: the file must not exist yet (a new persona).
    #[serde(default)]
    base_revision: Option<String>,
}

/// One problem, as the editor shows it.
#[derive(Debug, Serialize)]
pub struct Problem {
    /// The file it is in: the draft's own name, or a parent it `extends`.
    file: String,
    line: usize,
    col: usize,
    path: String,
    message: String,
    severity: &'static str,
}

#[derive(Debug, Serialize)]
pub struct CheckAnswer {
    ok: bool,
    problems: Vec<Problem>,
}

fn bounded(draft: &Draft) -> Result<FileName, ApiError> {
    let name = FileName::parse(&draft.file)?;
    if draft.text.len() > MAX_FILE_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("a character file is at most {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok(name)
}

/// Checks `text` as the file `name` of `dir` would be checked by `troupe check DIR`: its
/// own diagnostics and the conflicts with the other files there.
fn check_draft(
    dir: &FsPath,
    name: &FileName,
    text: &str,
    config: &crate::config::Config,
) -> Result<CheckAnswer, ApiError> {
    let (env, options) = (&config.env, &config.persona_load_options());
    let draft = dir.join(format!(".console-check-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&draft, text)
        .map_err(|e| ApiError::internal(format!("cannot write the draft to check: {e}")))?;
    let others: Vec<PathBuf> = crate::persona::persona_files(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|f| f != name.as_str()))
        .collect();
    let mut files = vec![draft.clone()];
    files.extend(others.iter().cloned());
    let mut report = crate::persona::check_files(&files, env, options);
    // The draft's tools, against the operator's policy, as `troupe check` checks them: a
    // server the policy refuses (an `env` variable, arguments, a command) is a problem, so
    // the save is refused (issue 43).
    for loaded in report.loaded.iter().filter(|l| l.persona.source == draft) {
        let calls_tools = crate::provider::resolve_target(&loaded.persona, env).is_ok();
        report.diagnostics.extend(crate::tools::check(
            &loaded.persona,
            &config.tools,
            calls_tools,
        ));
    }
    let _ = std::fs::remove_file(&draft);
    let problems: Vec<Problem> = report
        .diagnostics
        .into_iter()
        .filter(|d| !others.contains(&d.file))
        .map(|d| problem(d, dir, &draft, name))
        .collect();
    Ok(CheckAnswer {
        ok: !problems.iter().any(|p| p.severity == "error"),
        problems,
    })
}

/// One diagnostic for the caller. Files are named relative to the personas directory
/// (`shared/base.json`), never by an absolute path (issue 30, finding 3).
fn problem(d: Diagnostic, dir: &FsPath, draft: &FsPath, name: &FileName) -> Problem {
    let file = if d.file == draft {
        name.as_str().to_string()
    } else {
        relative_to(dir, &d.file)
    };
    // The draft's temporary name never reaches the author.
    let message = d
        .message
        .replace(&draft.display().to_string(), name.as_str());
    Problem {
        file,
        line: d.line,
        col: d.col,
        path: d.path,
        message,
        severity: match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        },
    }
}

/// `file` relative to `dir` (both resolved), or its file name alone when it is elsewhere.
fn relative_to(dir: &FsPath, file: &FsPath) -> String {
    let resolve = |p: &FsPath| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    match resolve(file).strip_prefix(resolve(dir)) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// `POST /api/characters/check`: `{file, text}` → `{ok, problems}`.
pub async fn check(
    State(state): State<AppState>,
    ApiJson(draft): ApiJson<Draft>,
) -> Result<Json<CheckAnswer>, ApiError> {
    let name = bounded(&draft)?;
    let dir = state.config.personas_dir.clone();
    let config = state.config.clone();
    let answer =
        tokio::task::spawn_blocking(move || check_draft(&dir, &name, &draft.text, &config))
            .await
            .map_err(ApiError::internal)??;
    Ok(Json(answer))
}

#[derive(Debug, Serialize)]
pub struct Saved {
    file: String,
    revision: String,
    problems: Vec<Problem>,
}

/// `PUT /api/characters/{file}`: `{file, text, baseRevision?}`. Checked first (422 with
/// the problems when it has errors), then written atomically.
pub async fn save(
    State(state): State<AppState>,
    Path(file): Path<String>,
    ApiJson(draft): ApiJson<Draft>,
) -> Result<(StatusCode, Json<Saved>), ApiError> {
    let name = bounded(&draft)?;
    if name.as_str() != file {
        return Err(ApiError::bad_request(
            "the body's `file` and the path's file name differ",
        ));
    }
    let path = resolve(&state, &name)?;
    let dir = state.config.personas_dir.clone();
    let config = state.config.clone();
    tokio::task::spawn_blocking(move || {
        let on_disk = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ApiError::internal(format!("cannot read `{file}`: {e}"))),
        };
        match (&draft.base_revision, &on_disk) {
            (None, Some(_)) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("`{file}` exists already; open it to edit it"),
                ));
            }
            (Some(_), None) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("`{file}` is gone from disk since it was opened"),
                ));
            }
            (Some(base), Some(text)) if *base != revision(text) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("`{file}` changed on disk since it was opened; reload it first"),
                ));
            }
            _ => {}
        }
        let answer = check_draft(&dir, &name, &draft.text, &config)?;
        if !answer.ok {
            // Every error (a few at most), each at its place: an author fixes them in one go.
            let errors: Vec<String> = answer
                .problems
                .iter()
                .filter(|p| p.severity == "error")
                .take(MAX_ERRORS_SHOWN)
                .map(|p| format!("{}:{}:{}: {}: {}", p.file, p.line, p.col, p.path, p.message))
                .collect();
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_character",
                format!("not saved: {}", errors.join("; ")),
            ));
        }
        write_atomically(&dir, &path, &draft.text)
            .map_err(|e| ApiError::internal(format!("cannot save `{file}`: {e}")))?;
        let status = if on_disk.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((
            status,
            Json(Saved {
                file,
                revision: revision(&draft.text),
                problems: answer.problems,
            }),
        ))
    })
    .await
    .map_err(ApiError::internal)?
}

/// Writes `text` to a dot-file in `dir`, flushes it, and renames it over `path`.
fn write_atomically(dir: &FsPath, path: &FsPath, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut temp = tempfile::Builder::new()
        .prefix(".console-save-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temp.write_all(text.as_bytes())?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::FileName;

    #[test]
    fn only_plain_json_names_are_files() {
        for ok in ["eliza.json", "my-bot_2.json", "a.b.json"] {
            assert!(FileName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "../x.json",
            "a/b.json",
            "/etc/x.json",
            ".hidden.json",
            "x.txt",
            ".json",
            "a..json",
            "a\\b.json",
            "é.json",
            "",
        ] {
            assert!(FileName::parse(bad).is_err(), "{bad}");
        }
        assert!(FileName::parse(&format!("{}.json", "a".repeat(100))).is_err());
    }
}
