//! Local embedding models fetched from the Hugging Face Hub: `troupe models pull [NAME]`, and
//! the background pull of `TROUPE_MODELS_AUTO_PULL` (docs/knowledge.md, "Getting the local
//! model").
//!
//! It owns which models troupe knows by a short name, which files of a repository the local
//! model needs (knowledge/embed/local.rs reads them), and how a pull lands: every file is
//! downloaded into a staging directory beside the model directory (`.<name>.pull/`), resumed
//! there after an interruption, checked against the hub's hash, and only when all of them
//! are there is the staging directory renamed onto the model directory. A model directory is
//! therefore complete or absent, never half written; a file that fails its check is deleted
//! and nothing is installed.

mod download;
mod hub;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::config::HubSettings;
use hub::Hub;

/// The files a model directory must hold for the local model (knowledge/embed/local.rs).
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Files read when present (pooling, maximum length), and the tokenizer's own settings,
/// which sentence-transformers keeps beside it. The repository's other files (PyTorch, ONNX
/// and TensorFlow weights, the README) are not fetched.
const OPTIONAL_FILES: [&str; 6] = [
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "modules.json",
    "config_sentence_transformers.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

/// What a pull records in the model directory: where it came from.
const RECORD: &str = "troupe-model.json";

/// The largest weights file a pull takes (issue 43): 768 MiB holds the sentence-transformers
/// models the loader reads in f32, up to base size (all-MiniLM-L6-v2 is 87 MiB,
/// multilingual-e5-small 449 MiB, bge-base and all-mpnet-base about 418 MiB), and stops a
/// hub from filling the disk.
pub const MAX_WEIGHTS_BYTES: u64 = 768 << 20;

/// The largest other file (the configuration and tokenizer JSON files; a multilingual
/// `tokenizer.json` is about 17 MB).
pub const MAX_OTHER_BYTES: u64 = 64 << 20;

/// The most bytes a pull takes for the file `name`.
pub(crate) fn max_bytes(name: &str) -> u64 {
    if name.ends_with(".safetensors") {
        MAX_WEIGHTS_BYTES
    } else {
        MAX_OTHER_BYTES
    }
}

/// Models known by a short name: (name, repository).
const KNOWN: [(&str, &str); 2] = [
    ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("multilingual-e5-small", "intfloat/multilingual-e5-small"),
];

/// A model on the hub: a repository id (`owner/name`), parsed from a short name
/// (`all-MiniLM-L6-v2`, `multilingual-e5-small`) or given whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelName {
    repo: String,
}

impl ModelName {
    /// all-MiniLM-L6-v2, the model troupe looks for by default.
    pub fn default_model() -> ModelName {
        ModelName {
            repo: KNOWN[0].1.to_string(),
        }
    }

    /// The model a directory is named after (`…/multilingual-e5-small`), else the default.
    pub fn for_dir(dir: &Path) -> ModelName {
        dir.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| {
                KNOWN
                    .iter()
                    .find(|(short, _)| short.eq_ignore_ascii_case(n))
            })
            .map_or_else(Self::default_model, |(_, repo)| ModelName {
                repo: repo.to_string(),
            })
    }

    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The last part of the repository id: the directory it is installed as.
    pub fn dir_name(&self) -> &str {
        self.repo.rsplit('/').next().unwrap_or(&self.repo)
    }
}

impl FromStr for ModelName {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        if let Some((_, repo)) = KNOWN
            .iter()
            .find(|(short, repo)| short.eq_ignore_ascii_case(raw) || repo.eq_ignore_ascii_case(raw))
        {
            return Ok(ModelName {
                repo: repo.to_string(),
            });
        }
        let parts: Vec<&str> = raw.split('/').collect();
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 96
                && !p.starts_with(['.', '-'])
                && !p.contains("..")
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        if parts.len() == 2 && parts.iter().all(|p| part_ok(p)) {
            return Ok(ModelName {
                repo: raw.to_string(),
            });
        }
        let known: Vec<&str> = KNOWN.iter().map(|(short, _)| *short).collect();
        Err(format!(
            "`{}` is not a model troupe knows ({}) nor a hub repository id (`owner/name`)",
            raw.escape_default(),
            known.join(", ")
        ))
    }
}

/// Where a pull goes: the configured model directory when it is named after the model (or
/// no model was named), else a directory of the model's name beside it.
pub fn target_dir(name: Option<&ModelName>, configured: &Path) -> (ModelName, PathBuf) {
    let model = name
        .cloned()
        .unwrap_or_else(|| ModelName::for_dir(configured));
    let configured_name = configured.file_name().and_then(|n| n.to_str());
    let dir = match configured_name {
        Some(n) if name.is_none() || n.eq_ignore_ascii_case(model.dir_name()) => {
            configured.to_path_buf()
        }
        _ => configured
            .parent()
            .unwrap_or(Path::new("."))
            .join(model.dir_name()),
    };
    (model, dir)
}

/// Whether `dir` holds every file the loader needs.
pub fn installed(dir: &Path) -> bool {
    REQUIRED_FILES.iter().all(|f| dir.join(f).is_file())
}

/// What a pull did.
#[derive(Debug)]
pub struct Pulled {
    pub dir: PathBuf,
    pub commit: String,
    /// Bytes of the files installed.
    pub bytes: u64,
    /// The directory already held this commit: nothing was downloaded.
    pub up_to_date: bool,
}

/// How a pull reports: a progress bar in a terminal (drawn only there), and one line per
/// step on stderr or in the log (a container's one-time download shows in its log).
pub struct Progress {
    bar: indicatif::ProgressBar,
    to_log: bool,
}

impl Progress {
    /// A byte progress bar on stderr, and lines on stderr.
    pub fn terminal() -> Progress {
        let bar = indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, {eta} left",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Progress { bar, to_log: false }
    }

    /// Lines in the log only: for the background pull.
    pub fn log() -> Progress {
        Progress {
            bar: indicatif::ProgressBar::hidden(),
            to_log: true,
        }
    }

    fn say(&self, line: &str) {
        if self.to_log {
            tracing::info!("{line}");
        } else {
            self.bar.suspend(|| eprintln!("troupe: {line}"));
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Record {
    repo: String,
    commit: String,
    endpoint: String,
}

/// Pulls `model` at `revision` from the hub in `settings` into `dir`.
pub async fn pull(
    settings: &HubSettings,
    model: &ModelName,
    revision: &str,
    dir: &Path,
    progress: &Progress,
) -> anyhow::Result<Pulled> {
    let hub = Hub::new(settings)?;
    let snapshot = hub.snapshot(model.repo(), revision).await?;
    // Replicas sharing a models volume pull one at a time; the others then find it there.
    let _lock = lock_pull(dir, progress).await?;
    if installed(dir) && recorded_commit(dir).as_deref() == Some(snapshot.commit.as_str()) {
        return Ok(Pulled {
            dir: dir.to_path_buf(),
            commit: snapshot.commit,
            bytes: 0,
            up_to_date: true,
        });
    }
    let files = wanted_files(&hub, model, &snapshot)?;
    // A size the hub announces past the cap is refused before anything is downloaded or
    // written; a download is stopped at the cap too (download.rs).
    if let Some(file) = files.iter().find(|f| f.size.is_some_and(|s| s > f.cap)) {
        bail!(
            "{} announces {} as {} bytes; troupe takes at most {} for it, so nothing was \
             downloaded (docs/knowledge.md, \"Getting the local model\")",
            hub.endpoint(),
            file.name,
            file.size.unwrap_or_default(),
            file.cap
        );
    }
    let staging = staging_dir(dir)?;
    prepare_staging(&staging, &snapshot.commit).await?;
    let total: u64 = files.iter().filter_map(|f| f.size).sum();
    progress.say(&format!(
        "pulling {} (commit {}) from {}: {} files, {} into {}",
        model.repo(),
        &snapshot.commit[..12],
        hub.endpoint(),
        files.len(),
        indicatif::HumanBytes(total),
        dir.display()
    ));
    progress.bar.set_length(total);
    let mut bytes = 0;
    for file in &files {
        bytes += fetch_checked(&hub, file, &staging, progress).await?;
    }
    progress.bar.finish_and_clear();
    let record = Record {
        repo: model.repo().to_string(),
        commit: snapshot.commit.clone(),
        endpoint: hub.endpoint().to_string(),
    };
    tokio::fs::write(staging.join(RECORD), serde_json::to_vec_pretty(&record)?).await?;
    let _ = tokio::fs::remove_file(staging.join(COMMIT_MARK)).await;
    install(&staging, dir).await?;
    Ok(Pulled {
        dir: dir.to_path_buf(),
        commit: snapshot.commit,
        bytes,
        up_to_date: false,
    })
}

/// The files of `snapshot` the loader reads: every required one (its absence is an
/// error), and the optional ones the repository has.
fn wanted_files(
    hub: &Hub,
    model: &ModelName,
    snapshot: &hub::Snapshot,
) -> anyhow::Result<Vec<hub::HubFile>> {
    let mut files = Vec::new();
    for name in REQUIRED_FILES {
        match hub.file(model.repo(), snapshot, name)? {
            Some(file) => files.push(file),
            None => bail!(
                "{} has no {name}: troupe reads sentence-transformers models with \
                 safetensors weights",
                model.repo()
            ),
        }
    }
    for name in OPTIONAL_FILES {
        files.extend(hub.file(model.repo(), snapshot, name)?);
    }
    Ok(files)
}

/// `file` into `staging`, downloaded (or resumed) and checked, unless an earlier run of
/// this commit already did; its size. A file that fails its check is deleted.
async fn fetch_checked(
    hub: &Hub,
    file: &hub::HubFile,
    staging: &Path,
    progress: &Progress,
) -> anyhow::Result<u64> {
    let done = staging.join(file.name);
    if done.is_file() {
        progress.bar.inc(file.size.unwrap_or(0));
    } else {
        let part = staging.join(format!("{}.part", file.name));
        download::fetch(hub, file, &part, &progress.bar).await?;
        if let Err(why) = download::verify(&part, &file.expected).await {
            let _ = tokio::fs::remove_file(&part).await;
            bail!(
                "{} from {} is not the file the hub published ({why}); it was deleted \
                 and nothing was installed",
                file.name,
                hub.endpoint()
            );
        }
        tokio::fs::rename(&part, &done).await?;
    }
    let size = tokio::fs::metadata(&done).await?.len();
    progress.say(&format!(
        "{} ({}) checked",
        file.name,
        indicatif::HumanBytes(size)
    ));
    Ok(size)
}

/// The commit a staging directory's files come from: a resume from another commit starts
/// again.
const COMMIT_MARK: &str = ".commit";

/// `.<name>.pull` beside `dir`: on the same file system, so installing is a rename.
fn staging_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} is not a directory name", dir.display()))?;
    Ok(dir
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.pull")))
}

/// Holds `.<name>.pull.lock` beside `dir` (an OS file lock, released when the process
/// ends, however it ends), waiting for another process's pull if one holds it.
async fn lock_pull(dir: &Path, progress: &Progress) -> anyhow::Result<std::fs::File> {
    let path = staging_dir(dir)?.with_extension("pull.lock");
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            progress.say("another process is pulling this model; waiting for it");
            tokio::task::spawn_blocking(move || file.lock().map(|()| file))
                .await?
                .with_context(|| format!("cannot lock {}", path.display()))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Makes `staging` hold only files of `commit` (what an earlier pull of it left is kept).
async fn prepare_staging(staging: &Path, commit: &str) -> anyhow::Result<()> {
    let mark = staging.join(COMMIT_MARK);
    let kept = tokio::fs::read_to_string(&mark).await.ok();
    if kept.as_deref().map(str::trim) != Some(commit) && staging.exists() {
        tokio::fs::remove_dir_all(staging).await?;
    }
    tokio::fs::create_dir_all(staging)
        .await
        .with_context(|| format!("cannot create {}", staging.display()))?;
    tokio::fs::write(&mark, commit).await?;
    Ok(())
}

/// Renames `staging` onto `dir`; an older model there is moved aside first and removed after.
async fn install(staging: &Path, dir: &Path) -> anyhow::Result<()> {
    let old = staging.with_extension("old");
    if old.exists() {
        tokio::fs::remove_dir_all(&old).await?;
    }
    if dir.exists() {
        tokio::fs::rename(dir, &old)
            .await
            .with_context(|| format!("cannot move the old {} aside", dir.display()))?;
    }
    tokio::fs::rename(staging, dir)
        .await
        .with_context(|| format!("cannot install the model into {}", dir.display()))?;
    if old.exists() {
        tokio::fs::remove_dir_all(&old).await?;
    }
    Ok(())
}

/// The commit a pull recorded in `dir`, if one did.
fn recorded_commit(dir: &Path) -> Option<String> {
    let raw = std::fs::read(dir.join(RECORD)).ok()?;
    serde_json::from_slice::<Record>(&raw)
        .ok()
        .map(|r| r.commit)
}

/// `troupe models …`.
#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    command: ModelsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ModelsCommand {
    /// Download a local embedding model from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN)
    /// into TROUPE_EMBEDDING_MODEL_DIR, checked against the hub's sha256.
    Pull {
        /// `all-MiniLM-L6-v2` (the default), `multilingual-e5-small`, or a hub repository
        /// id (`owner/name`) of a sentence-transformers model with safetensors weights.
        name: Option<ModelName>,
        /// Install here instead (default: TROUPE_EMBEDDING_MODEL_DIR when it is named after
        /// the model, else a directory of the model's name beside it).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A branch, tag or commit of the repository.
        #[arg(long, default_value = "main")]
        revision: String,
    },
}

/// Runs `troupe models …`.
pub async fn run_cli(
    config: &crate::config::Config,
    args: ModelsArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let ModelsCommand::Pull {
        name,
        dir,
        revision,
    } = args.command;
    let configured = configured_dir(config);
    let (model, target) = target_dir(name.as_ref(), &configured);
    let target = dir.unwrap_or(target);
    let pulled = pull(
        &config.knowledge.hub,
        &model,
        &revision,
        &target,
        &Progress::terminal(),
    )
    .await?;
    if pulled.up_to_date {
        println!(
            "troupe: {} in {} is up to date (commit {})",
            model.repo(),
            pulled.dir.display(),
            &pulled.commit[..12]
        );
    } else {
        println!(
            "troupe: {} installed in {} ({})",
            model.repo(),
            pulled.dir.display(),
            indicatif::HumanBytes(pulled.bytes)
        );
    }
    if pulled.dir != configured {
        println!(
            "troupe: to use it, set TROUPE_EMBEDDING_MODEL_DIR={}",
            pulled.dir.display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The local model directory the configuration names (or the default one).
pub fn configured_dir(config: &crate::config::Config) -> PathBuf {
    config
        .knowledge
        .embedding
        .as_ref()
        .and_then(|e| e.model_dir.clone())
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_LOCAL_MODEL_DIR))
}

#[cfg(test)]
mod tests;
