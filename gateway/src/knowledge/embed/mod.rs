//! Embeddings: text to unit-length vectors, through an API (`api`: OpenAI-compatible or
//! Ollama) or in this process (`local`: feature `local-embeddings`, running the encoder
//! crate, troupe's own BERT forward).
//!
//! It owns what every backend shares: the model profile's query and passage prefixes
//! (`profile`), batching, unit length (so cosine similarity is a dot product), the name
//! stored with each vector, what a local model reads of a long text (its windows, pooled:
//! `window`), and an optional memo of vectors by text for evaluations that embed one corpus
//! into several stores.

mod api;
#[cfg(feature = "local-embeddings")]
mod local;
mod profile;
#[cfg(feature = "local-embeddings")]
mod window;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use troupe_connectors::sync::Locked;

pub use profile::{Profile, Role};

use crate::config::{EmbeddingApi, EmbeddingSettings};

/// Texts sent per API request: large enough to amortise the round trip, small enough to
/// stay under the providers' per-request input limits with 400-token chunks.
const BATCH: usize = 64;

/// A cheap-to-clone handle on one embedding model.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    backend: Backend,
    model: String,
    profile: Profile,
    /// Whether a local model reads a long text as its windows, pooled (`window`), rather
    /// than its first `max_tokens` only. On, except for evaluations of the difference.
    windows: bool,
    /// Vectors by the exact text the model read (prefix included; a window of a long
    /// text), when memoised.
    memo: Option<Arc<Memo>>,
}

/// Vectors by the exact text embedded.
type Memo = Mutex<HashMap<String, Vec<f32>>>;

#[derive(Debug, Clone)]
enum Backend {
    Api(api::Api),
    #[cfg(feature = "local-embeddings")]
    Local(local::Local),
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("backend", &self.inner.backend)
            .field("model", &self.inner.model)
            .field("profile", &self.inner.profile)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// An embedder for `settings`. An API embedder always opens (its errors come at the
    /// first call); a local one fails here when its directory lacks the model's files, or
    /// when troupe was built without `local-embeddings`.
    pub fn open(settings: &EmbeddingSettings) -> Result<Embedder, String> {
        let backend = match settings.api {
            EmbeddingApi::OpenAi | EmbeddingApi::Ollama => Backend::Api(api::Api::new(settings)),
            EmbeddingApi::Local => local_backend(settings.model_dir.as_deref())?,
        };
        // A server told the side applies the model's prefixes itself.
        let base = match settings.input_type {
            true => Profile::default(),
            false => Profile::for_model(&settings.model),
        };
        let profile = base.overridden(
            settings.query_prefix.as_deref(),
            settings.passage_prefix.as_deref(),
        );
        Ok(Embedder {
            inner: Arc::new(Inner {
                backend,
                model: settings.model.clone(),
                profile,
                windows: true,
                memo: None,
            }),
        })
    }

    /// This embedder with a local model reading only the first `max_tokens` of a long
    /// text, as before windows: to measure what windows change (gateway/tests/
    /// retrieval_quality.rs). Its vectors are stored under the model's plain name, apart
    /// from the windowed ones; the memo, if any, is shared (a text longer than a window is
    /// never a window, so the two never disagree on a text).
    pub fn truncating(self) -> Embedder {
        let mut inner = (*self.inner).clone();
        inner.windows = false;
        Embedder {
            inner: Arc::new(inner),
        }
    }

    /// This embedder, remembering every vector by its text: the same text is embedded once
    /// however many stores it goes into. Unbounded: for evaluations and benchmarks over a
    /// fixed corpus (gateway/tests/retrieval_quality.rs), not for a gateway.
    pub fn memoized(self) -> Embedder {
        let mut inner = (*self.inner).clone();
        inner.memo = Some(Arc::new(Mutex::new(HashMap::new())));
        Embedder {
            inner: Arc::new(inner),
        }
    }

    /// Everything the memo holds, as `(text embedded, unit vector)`; empty when this
    /// embedder does not memoise. With [`Embedder::remember`], an evaluation keeps its
    /// vectors between runs (gateway/tests/retrieval_quality.rs caches them on disk).
    pub fn remembered(&self) -> Vec<(String, Vec<f32>)> {
        match &self.inner.memo {
            Some(memo) => {
                let memo = memo.locked();
                memo.iter().map(|(t, v)| (t.clone(), v.clone())).collect()
            }
            None => Vec::new(),
        }
    }

    /// Adds vectors to the memo (nothing when this embedder does not memoise). They are
    /// trusted as they are: call [`Embedder::check_remembered`] on what came from elsewhere.
    pub fn remember(&self, entries: impl IntoIterator<Item = (String, Vec<f32>)>) {
        if let Some(memo) = &self.inner.memo {
            let mut memo = memo.locked();
            memo.extend(entries);
        }
    }

    /// Empties the memo: after [`Embedder::check_remembered`] found kept vectors stale.
    pub fn forget_remembered(&self) {
        if let Some(memo) = &self.inner.memo {
            memo.locked().clear();
        }
    }

    /// Runs `sample` remembered texts (spread evenly over the memo, in text order) through
    /// the model again, past the memo, and answers the lowest cosine similarity between a
    /// remembered vector and the fresh one (1.0 for an empty memo). A changed model, or a
    /// change in how texts are read, shows here as a similarity well under 1.
    pub async fn check_remembered(&self, sample: usize) -> Result<f32, String> {
        let mut entries = self.remembered();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let step = (entries.len() / sample.max(1)).max(1);
        let picked: Vec<(String, Vec<f32>)> =
            entries.into_iter().step_by(step).take(sample).collect();
        let mut lowest = 1.0f32;
        for batch in picked.chunks(BATCH) {
            let texts: Vec<&str> = batch.iter().map(|(t, _)| t.as_str()).collect();
            // The memo holds texts with their prefix, so they go to the model as they are
            // (an API told the side would see every text as a passage: check local models).
            let (fresh, _) = self.backend_embed(Role::Passage, &texts).await?;
            for ((_, kept), v) in batch.iter().zip(fresh) {
                let v = normalized(v);
                let cosine: f32 = kept.iter().zip(&v).map(|(a, b)| a * b).sum();
                lowest = lowest.min(if kept.len() == v.len() { cosine } else { 0.0 });
            }
        }
        Ok(lowest)
    }

    /// The name stored with each vector: the model, and the size when one was asked for
    /// (the same model cut to another size gives vectors that do not compare); for a local
    /// model reading long texts by windows, `#w` and the window (`all-MiniLM-L6-v2#w256`),
    /// so that vectors stored when it read only a text's start are not mixed with these:
    /// the backfill at start embeds every chunk again under the new name.
    pub fn model_key(&self) -> String {
        match &self.inner.backend {
            Backend::Api(api) if api.dimensions().is_some() => {
                format!("{}@{}", self.inner.model, api.dimensions().unwrap_or(0))
            }
            #[cfg(feature = "local-embeddings")]
            Backend::Local(local) if self.inner.windows => {
                format!("{}#w{}", self.inner.model, local.max_tokens())
            }
            _ => self.inner.model.clone(),
        }
    }

    /// The vendor and model, for usage accounting: `openai` and `text-embedding-3-small`,
    /// `local` and `all-MiniLM-L6-v2`.
    pub fn model(&self) -> crate::spend::ModelRef {
        let vendor = match &self.inner.backend {
            Backend::Api(api) => api.vendor(),
            #[cfg(feature = "local-embeddings")]
            Backend::Local(_) => "local",
        };
        crate::spend::ModelRef::new(vendor, self.inner.model.clone())
    }

    /// `openai:text-embedding-3-small`, `local:all-MiniLM-L6-v2`: for logs.
    pub fn describe(&self) -> String {
        self.model().to_string()
    }

    /// The prefixes this embedder puts before queries and passages.
    pub fn profile(&self) -> &Profile {
        &self.inner.profile
    }

    /// One unit-length vector per text, in order.
    pub async fn embed(&self, role: Role, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.embed_counted(role, texts)
            .await
            .map(|(vectors, _)| vectors)
    }

    /// `embed`, with the input tokens the model read (`None` when an API's answer had no
    /// usage): for spend accounting (docs/spend.md).
    pub async fn embed_counted(
        &self,
        role: Role,
        texts: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let windows = self.windows(role, texts).await?;
        let mut unique: Vec<&str> = windows.iter().flatten().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let (vectors, tokens) = self.embed_read(role, &unique).await?;
        let by_text: HashMap<&str, Vec<f32>> = unique.into_iter().zip(vectors).collect();
        let pooled = windows
            .iter()
            .map(|w| pooled(w.iter().filter_map(|t| by_text.get(t.as_str()))))
            .collect();
        Ok((pooled, tokens))
    }

    /// Each text as the model reads it, with the role's prefix: a local model's windows
    /// (`window`), or the whole text.
    async fn windows(&self, role: Role, texts: &[&str]) -> Result<Vec<Vec<String>>, String> {
        let profile = &self.inner.profile;
        match &self.inner.backend {
            #[cfg(feature = "local-embeddings")]
            Backend::Local(local) if self.inner.windows => {
                let owned = texts.iter().map(|t| t.to_string()).collect();
                let cut = local
                    .windows(profile.prefix(role).to_string(), owned)
                    .await?;
                Ok(cut
                    .into_iter()
                    .map(|w| w.iter().map(|t| profile.apply(role, t)).collect())
                    .collect())
            }
            _ => Ok(texts.iter().map(|t| vec![profile.apply(role, t)]).collect()),
        }
    }

    /// One unit vector per text the model reads whole (prefixed), through the memo.
    async fn embed_read(
        &self,
        role: Role,
        prefixed: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let mut out: Vec<Option<Vec<f32>>> = match &self.inner.memo {
            Some(memo) => {
                let memo = memo.locked();
                prefixed.iter().map(|t| memo.get(*t).cloned()).collect()
            }
            None => vec![None; prefixed.len()],
        };
        let todo: Vec<usize> = (0..prefixed.len()).filter(|&i| out[i].is_none()).collect();
        let mut tokens = Some(0u64);
        for batch in todo.chunks(self.batch()) {
            let texts: Vec<&str> = batch.iter().map(|&i| prefixed[i]).collect();
            let (vectors, used) = self.backend_embed(role, &texts).await?;
            tokens = tokens.zip(used).map(|(a, b)| a + b);
            if vectors.len() != batch.len() {
                return Err(format!(
                    "the embedding model returned {} vectors for {} inputs",
                    vectors.len(),
                    batch.len()
                ));
            }
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = Some(normalized(v));
            }
        }
        if let Some(memo) = &self.inner.memo {
            let mut memo = memo.locked();
            for &i in &todo {
                if let Some(v) = &out[i] {
                    memo.insert(prefixed[i].to_string(), v.clone());
                }
            }
        }
        Ok((
            out.into_iter().map(Option::unwrap_or_default).collect(),
            tokens,
        ))
    }

    /// Texts per call to the backend: an API's request limit; for the local model a whole
    /// page of ingestion, so that it sorts all of them by length before cutting its passes
    /// (64 at a time, each quarter padded on its own).
    fn batch(&self) -> usize {
        match &self.inner.backend {
            Backend::Api(_) => BATCH,
            #[cfg(feature = "local-embeddings")]
            Backend::Local(_) => local::COALESCE,
        }
    }

    async fn backend_embed(
        &self,
        role: Role,
        texts: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        match &self.inner.backend {
            Backend::Api(api) => api.embed(role, texts).await,
            #[cfg(feature = "local-embeddings")]
            Backend::Local(local) => local
                .embed(texts.iter().map(|t| t.to_string()).collect())
                .await
                .map(|(v, tokens)| (v, Some(tokens))),
        }
    }
}

#[cfg(not(feature = "local-embeddings"))]
const NO_LOCAL: &str = "this troupe was built without the `local-embeddings` feature";

fn local_backend(dir: Option<&Path>) -> Result<Backend, String> {
    let dir = dir.ok_or("a local embedding model needs TROUPE_EMBEDDING_MODEL_DIR")?;
    #[cfg(feature = "local-embeddings")]
    {
        local::Local::open(dir).map(Backend::Local)
    }
    #[cfg(not(feature = "local-embeddings"))]
    {
        let _ = dir;
        Err(NO_LOCAL.to_string())
    }
}

/// The unit mean of a text's window vectors: the one vector itself when it fits one window.
fn pooled<'v>(mut vectors: impl Iterator<Item = &'v Vec<f32>>) -> Vec<f32> {
    let Some(first) = vectors.next() else {
        return Vec::new();
    };
    let mut sum = first.clone();
    let mut more = false;
    for v in vectors {
        more = true;
        sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
    }
    if more { normalized(sum) } else { sum }
}

/// `v` scaled to unit length (a zero vector stays zero).
pub(crate) fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

/// Little-endian f32 bytes, as stored.
pub(crate) fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[cfg(test)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = normalized(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(from_bytes(&to_bytes(&v)), v);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
        assert_eq!(normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn windows_pool_to_their_unit_mean() {
        let (a, b) = (vec![1.0, 0.0], vec![0.0, 1.0]);
        assert_eq!(pooled([&a].into_iter()), a);
        let mean = pooled([&a, &b].into_iter());
        assert!((mean[0] - mean[1]).abs() < 1e-6 && (dot(&mean, &mean) - 1.0).abs() < 1e-6);
        assert!(pooled(std::iter::empty()).is_empty());
    }
}
