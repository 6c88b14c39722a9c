//! The Hugging Face Hub as `troupe models pull` sees it: one repository's files at one
//! commit, each with the hash the hub publishes for it.
//!
//! The `hf-hub` crate builds the client (the endpoint, `HF_TOKEN` as a bearer header, its
//! user agent) and the hub's URLs (`/api/models/{repo}/revision/{rev}`,
//! `/{repo}/resolve/{commit}/{file}`). We ask the metadata route with `blobs=true`, which
//! adds each file's size, its git blob id and, for files kept in LFS, their sha256: the
//! hashes every file is checked against (download.rs). Every file is resolved at the commit
//! the metadata named, so a push to the repository during a pull cannot mix two versions.

use std::time::Duration;

use anyhow::{Context, bail};
use hf_hub::api::tokio::{Api, ApiBuilder};
use hf_hub::{Repo, RepoType};
use secrecy::ExposeSecret;
use serde::Deserialize;

use crate::config::HubSettings;

/// How long the hub may take to answer a request (not a whole download: download.rs bounds
/// each read on its own).
pub(super) const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// A client of one hub.
pub(super) struct Hub {
    api: Api,
    endpoint: String,
}

/// A file of the repository and what it must hash to.
#[derive(Debug, Clone)]
pub(super) struct HubFile {
    /// Its path in the repository (`1_Pooling/config.json`); one of ours, never the hub's
    /// free text (mod.rs picks from a fixed list).
    pub name: &'static str,
    /// The resolve URL at the pinned commit.
    pub url: String,
    /// Its size, when the hub said.
    pub size: Option<u64>,
    /// The most bytes taken for it (`super::max_bytes`).
    pub cap: u64,
    pub expected: Expected,
}

/// The hash the hub publishes for a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expected {
    /// An LFS file: the sha256 of its bytes (lower-case hex).
    Sha256(String),
    /// A file kept in git: its blob id, SHA-1 of `blob <len>\0<bytes>` (lower-case hex).
    GitBlob(String),
}

/// The repository at one commit.
pub(super) struct Snapshot {
    /// The commit (40 hex digits).
    pub commit: String,
    files: Vec<Sibling>,
}

#[derive(Deserialize)]
struct RepoMeta {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    size: Option<u64>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: String,
    size: Option<u64>,
}

impl Hub {
    pub(super) fn new(settings: &HubSettings) -> anyhow::Result<Hub> {
        // The token is always set here (None without HF_TOKEN), so a token file the crate
        // would find in ~/.cache/huggingface is never sent to an endpoint we were given.
        let api = ApiBuilder::new()
            .with_endpoint(settings.endpoint.clone())
            .with_token(
                settings
                    .token
                    .as_ref()
                    .map(|t| t.expose_secret().to_string()),
            )
            .with_progress(false)
            .with_user_agent("troupe", env!("CARGO_PKG_VERSION"))
            .build()
            .context("could not build the hub client")?;
        Ok(Hub {
            api,
            endpoint: settings.endpoint.clone(),
        })
    }

    pub(super) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub(super) fn api(&self) -> &Api {
        &self.api
    }

    /// `repo` at `revision` (a branch, tag or commit): its commit and files.
    pub(super) async fn snapshot(&self, repo: &str, revision: &str) -> anyhow::Result<Snapshot> {
        let at = Repo::with_revision(repo.to_string(), RepoType::Model, revision.to_string());
        let request = self
            .api
            .repo(at)
            .info_request()
            .query(&[("blobs", "true")])
            .send();
        let answer = tokio::time::timeout(ANSWER_WAIT, request)
            .await
            .map_err(|_| self.unreachable(&format!("no answer within {ANSWER_WAIT:?}")))?
            .map_err(|e| self.unreachable(&innermost(&e)))?;
        let status = answer.status();
        match status.as_u16() {
            200 => {}
            401 | 403 => bail!(
                "{} refused {repo} ({status}): a private or gated model needs HF_TOKEN with \
                 access to it",
                self.endpoint
            ),
            404 => bail!(
                "{} has no model {repo} at revision {revision} ({status})",
                self.endpoint
            ),
            _ => bail!("{} answered {status} for {repo}", self.endpoint),
        }
        let meta: RepoMeta = answer
            .json()
            .await
            .with_context(|| format!("{} sent metadata troupe cannot read", self.endpoint))?;
        if meta.sha.len() != 40 || !meta.sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "{} named commit `{}` for {repo}, which is not a commit id",
                self.endpoint,
                meta.sha.escape_default()
            );
        }
        Ok(Snapshot {
            commit: meta.sha.to_ascii_lowercase(),
            files: meta.siblings,
        })
    }

    /// `name` of `snapshot` as a file to download, or `None` when the repository lacks it.
    pub(super) fn file(
        &self,
        repo: &str,
        snapshot: &Snapshot,
        name: &'static str,
    ) -> anyhow::Result<Option<HubFile>> {
        let Some(sibling) = snapshot.files.iter().find(|s| s.rfilename == name) else {
            return Ok(None);
        };
        let expected = match (&sibling.lfs, &sibling.blob_id) {
            (Some(lfs), _) => Expected::Sha256(hex_digest(&lfs.sha256, 64, name)?),
            (None, Some(blob)) => Expected::GitBlob(hex_digest(blob, 40, name)?),
            (None, None) => bail!(
                "{} publishes no hash for {name}, so it cannot be checked",
                self.endpoint
            ),
        };
        let at = Repo::with_revision(repo.to_string(), RepoType::Model, snapshot.commit.clone());
        Ok(Some(HubFile {
            name,
            url: self.api.repo(at).url(name),
            size: sibling.lfs.as_ref().and_then(|l| l.size).or(sibling.size),
            cap: super::max_bytes(name),
            expected,
        }))
    }

    /// The error for a hub that cannot be reached.
    pub(super) fn unreachable(&self, why: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "cannot reach the model hub at {} ({why}); set HF_ENDPOINT for a mirror, or copy \
             the model directory by hand (docs/knowledge.md, \"Getting the local model\")",
            self.endpoint
        )
    }
}

/// `raw` as lower-case hex of `len` digits, or an error naming the file.
fn hex_digest(raw: &str, len: usize, name: &str) -> anyhow::Result<String> {
    let digest = raw.trim_matches('"').to_ascii_lowercase();
    if digest.len() != len || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "the hub's hash for {name} (`{}`) is not {len} hex digits",
            raw.escape_default()
        );
    }
    Ok(digest)
}

/// The deepest cause of an error: "Connection refused (os error 111)" rather than "error
/// sending request".
pub(super) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
