//! The secrets file (issue 47): platform credentials the console stores for a persona, kept
//! outside character files, which people commit to git. It is `TROUPE_SECRETS_FILE`
//! (default `data/secrets.json`), JSON `{"<persona id>": {"TELEGRAM_BOT_TOKEN": "…"}}`,
//! written whole (a temporary file, then a rename) with mode 0600.
//!
//! - It is read once at start. A file that others may read or write (any of mode `077`)
//!   is still read, with a warning, but troupe refuses to write to it: whoever widened it
//!   should narrow it again (`chmod 600`), not have troupe keep writing secrets into it.
//! - Only the platform keys of [`KEYS`] are kept; nothing else in it is ever read.
//! - Values reach personas through the environment snapshot, under names no environment
//!   variable can have ([`crate::persona::stored_name`]); `persona/secrets.rs` puts them
//!   after the operator's environment and before the character file.
//!
//! Nothing here logs a value: errors name the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use troupe_connectors::sync::Locked;

use crate::persona::Env;

/// The keys the console may store: each platform's credentials and the ids that go with
/// them.
pub const KEYS: &[&str] = &[
    "DISCORD_API_TOKEN",
    "DISCORD_APPLICATION_ID",
    "TELEGRAM_BOT_TOKEN",
    "FARCASTER_NEYNAR_API_KEY",
    "FARCASTER_NEYNAR_SIGNER_UUID",
    "FARCASTER_FID",
];

/// Persona id → key → value.
type Values = BTreeMap<String, BTreeMap<String, String>>;

/// The secrets file: a cheap-to-clone handle, shared by the app (which starts connectors
/// with its values) and the HTTP API (which changes them).
#[derive(Clone)]
pub struct SecretsFile {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    path: PathBuf,
    values: Values,
    /// Why troupe will not write the file, when it will not.
    read_only: Option<String>,
}

/// Why a change was not kept.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The file's permissions (or an earlier warning) forbid writing it.
    #[error("{0}")]
    Refused(String),
    #[error("cannot write the secrets file {path}: {error}")]
    Io { path: String, error: std::io::Error },
}

impl SecretsFile {
    /// Reads `path`. A missing file is an empty one; a file troupe cannot parse stops the
    /// start (its secrets would otherwise be silently lost on the next write). The second
    /// value is the warning to log, when the file's mode lets others in.
    pub fn open(path: &Path) -> anyhow::Result<(SecretsFile, Option<String>)> {
        let shown = path.display();
        let (values, read_only) = match std::fs::read(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Values::new(), None),
            Err(e) => {
                anyhow::bail!("cannot read the secrets file {shown} (TROUPE_SECRETS_FILE): {e}")
            }
            Ok(bytes) => {
                let values = parse(&bytes).map_err(|e| {
                    anyhow::anyhow!(
                        "the secrets file {shown} (TROUPE_SECRETS_FILE) is not \
                         {{\"<persona id>\": {{\"KEY\": \"value\"}}}}: {}",
                        without_values(&e)
                    )
                })?;
                (values, too_open(path))
            }
        };
        let file = SecretsFile {
            inner: Arc::new(Mutex::new(Inner {
                path: path.to_path_buf(),
                values,
                read_only: read_only.clone(),
            })),
        };
        Ok((file, read_only))
    }

    /// `base` with this file's values under their reserved names, and none of the names a
    /// value deleted since had.
    pub fn overlay(&self, base: &Env) -> Env {
        let mut env: Env = base
            .iter()
            .filter(|(k, _)| !crate::persona::is_stored_name(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (persona, keys) in &self.inner.locked().values {
            for (key, value) in keys {
                env.insert(crate::persona::stored_name(persona, key), value.clone());
            }
        }
        env
    }

    /// Whether the file holds `key` for `persona`.
    pub fn holds(&self, persona: &str, key: &str) -> bool {
        self.inner
            .locked()
            .values
            .get(persona)
            .is_some_and(|keys| keys.contains_key(key))
    }

    /// Why writing is refused, if it is.
    pub fn refused(&self) -> Option<String> {
        self.inner.locked().read_only.clone()
    }

    /// Sets (`Some`) or removes (`None`) each key for `persona`, and writes the file. On an
    /// error nothing changes, in memory or on disk.
    pub fn change(
        &self,
        persona: &str,
        changes: &[(&str, Option<String>)],
    ) -> Result<(), WriteError> {
        let mut inner = self.inner.locked();
        if let Some(why) = &inner.read_only {
            return Err(WriteError::Refused(why.clone()));
        }
        let mut values = inner.values.clone();
        let keys = values.entry(persona.to_string()).or_default();
        for (key, value) in changes {
            match value {
                Some(v) => keys.insert(key.to_string(), v.clone()),
                None => keys.remove(*key),
            };
        }
        if keys.is_empty() {
            values.remove(persona);
        }
        write(&inner.path, &values).map_err(|error| WriteError::Io {
            path: inner.path.display().to_string(),
            error,
        })?;
        inner.values = values;
        Ok(())
    }
}

fn parse(bytes: &[u8]) -> Result<Values, serde_json::Error> {
    let all: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_slice(bytes)?;
    Ok(all
        .into_iter()
        .map(|(persona, keys)| {
            let keys = keys
                .into_iter()
                .filter(|(k, v)| KEYS.contains(&k.as_str()) && !v.trim().is_empty())
                .collect();
            (persona, keys)
        })
        .collect())
}

/// Where and how the JSON is wrong, without serde's text: it quotes the values it met.
fn without_values(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax => "not JSON",
        Category::Data => "a value of the wrong type",
        Category::Eof => "cut short",
        Category::Io => "unreadable",
    };
    format!("{what} at line {}, column {}", e.line(), e.column())
}

/// The warning for a file others may read or write: troupe reads it and will not write it.
#[cfg(unix)]
fn too_open(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "the secrets file {} (TROUPE_SECRETS_FILE) has mode {mode:o}: others may read it; \
             troupe reads it but will not write to it until it is 600 (chmod 600 {})",
            path.display(),
            path.display()
        )
    })
}

#[cfg(not(unix))]
fn too_open(_: &Path) -> Option<String> {
    None
}

/// Writes `values` to `path` through a temporary file created with mode 0600, then a
/// rename, so a reader sees the old file or the new one, never half of one.
fn write(path: &Path, values: &Values) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "secrets.json".into());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    let text = serde_json::to_vec_pretty(values).map_err(std::io::Error::other)?;
    file.write_all(&text)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_written_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/secrets.json");
        let (file, warning) = SecretsFile::open(&path).unwrap();
        assert!(warning.is_none());
        file.change("tess", &[("TELEGRAM_BOT_TOKEN", Some("123:abcd".into()))])
            .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (again, _) = SecretsFile::open(&path).unwrap();
        assert!(again.holds("tess", "TELEGRAM_BOT_TOKEN"));
        let env = again.overlay(&Env::new());
        assert_eq!(
            env.get(&crate::persona::stored_name("tess", "TELEGRAM_BOT_TOKEN")),
            Some(&"123:abcd".to_string())
        );
        again
            .change("tess", &[("TELEGRAM_BOT_TOKEN", None)])
            .unwrap();
        assert!(
            again.overlay(&env).is_empty(),
            "a removed value leaves the overlay"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), "{}");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_read_and_never_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.json");
        std::fs::write(
            &path,
            r#"{"tess": {"TELEGRAM_BOT_TOKEN": "1:x", "OTHER": "y"}}"#,
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (file, warning) = SecretsFile::open(&path).unwrap();
        assert!(warning.unwrap().contains("mode 644"));
        assert!(file.holds("tess", "TELEGRAM_BOT_TOKEN"));
        assert!(
            !file.holds("tess", "OTHER"),
            "only the platform keys are kept"
        );
        let before = std::fs::read(&path).unwrap();
        let err = file
            .change("tess", &[("TELEGRAM_BOT_TOKEN", None)])
            .unwrap_err();
        assert!(matches!(err, WriteError::Refused(_)));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(file.holds("tess", "TELEGRAM_BOT_TOKEN"));
    }

    #[test]
    fn a_file_that_is_not_the_format_stops_the_start_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.json");
        std::fs::write(&path, r#"{"tess": "123:verysecret"}"#).unwrap();
        let err = SecretsFile::open(&path).err().unwrap().to_string();
        assert!(err.contains("TROUPE_SECRETS_FILE"), "{err}");
        assert!(!err.contains("verysecret"), "{err}");
    }
}
