//! The in-process embedding model: a BERT sentence encoder (all-MiniLM-L6-v2,
//! multilingual-e5-small…) run on the CPU, in-process, from a sentence-transformers model
//! directory (`config.json`, `tokenizer.json`, `model.safetensors`, optionally
//! `sentence_bert_config.json` and `1_Pooling/config.json`).
//!
//! The model runs on one dedicated thread that owns it: a forward pass is hundreds of
//! milliseconds of CPU, which must never run on an async worker. The thread loads the
//! weights at its first job (so a persona that never searches vectors never pays the
//! ~90 MB), then answers jobs in order; the forward uses every core inside a job (rayon's
//! pool). It ends when the last handle is dropped.
//!
//! The forward pass is the encoder crate's (troupe's own: packed tokens, no padding, fused
//! q/k/v, on plain buffers with vectorised element-wise steps and gemm's products), not
//! candle-transformers' `BertModel`, which computes the same vectors at a quarter of ONNX
//! Runtime's speed (docs/benchmarks.md); it reads the checkpoint too (`safetensors`).
//!
//! What it computes is what sentence-transformers computes for these models: WordPiece (or
//! SentencePiece) tokens with the special tokens, cut at the model's `max_seq_length`; the
//! last hidden states averaged over the real tokens (mean pooling, the mode that
//! `1_Pooling/config.json` names; CLS pooling is honoured too). Unit length is applied by
//! the caller, as for every embedder.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, mpsc};

use tokenizers::{Tokenizer, TruncationParams};
use troupe_encoder::{Bert, Config, first_rows, mean_rows};

use super::window::Windower;

/// Tokens one forward pass holds at most (its rows × its longest text, which bounds its
/// packed tokens). Texts are sorted by length first: a pass of short texts takes many of
/// them, one of long texts few, so every pass's matrix products are of a similar size and
/// short texts do not pay each step's fixed cost (gemm's packing, rayon's tasks) a few rows
/// at a time. 32 texts of 256 tokens (the longest MiniLM reads): the pass's widest buffer,
/// the feed-forward's 1,536 floats a token, is then 48 MB.
const FORWARD_TOKENS: usize = 32 * 256;
/// Rows of one forward pass at most, however short the texts.
const FORWARD_ROWS: usize = 256;
/// Texts from queued jobs run together at most: a page of ingestion comes as one job.
pub(super) const COALESCE: usize = 256;
/// The longest input when the directory does not say (`sentence_bert_config.json`).
const DEFAULT_MAX_TOKENS: usize = 256;

/// The files a model directory must hold (the same list `troupe models pull` fetches).
use crate::models::REQUIRED_FILES;

type Reply = tokio::sync::oneshot::Sender<Result<(Vec<Vec<f32>>, u64), String>>;

struct Job {
    texts: Vec<String>,
    reply: Reply,
}

/// A handle on the model thread.
#[derive(Clone)]
pub(super) struct Local {
    dir: PathBuf,
    jobs: mpsc::Sender<Job>,
    /// The model's longest input, in its tokens (special tokens included).
    max_tokens: usize,
    /// Cuts long texts into what the model reads (`window`): its tokenizer, read at the
    /// first call (a load failure is kept, like the model thread's).
    windower: Arc<OnceLock<Result<Windower, String>>>,
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local").field("dir", &self.dir).finish()
    }
}

impl Local {
    /// A model in `dir`: its files are checked now, the weights are read at the first job.
    pub(super) fn open(dir: &Path) -> Result<Local, String> {
        if let Some(missing) = missing_files(dir) {
            return Err(missing);
        }
        let (jobs, queue) = mpsc::channel::<Job>();
        let at = dir.to_path_buf();
        std::thread::Builder::new()
            .name("troupe-embed".into())
            .spawn(move || serve(&at, queue))
            .map_err(|e| format!("could not start the embedding thread: {e}"))?;
        Ok(Local {
            dir: dir.to_path_buf(),
            jobs,
            max_tokens: max_tokens(dir, None),
            windower: Arc::new(OnceLock::new()),
        })
    }

    /// The model's longest input, in its tokens.
    pub(super) fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Each text as the windows the model reads whole (`window`): `[text]` when it fits
    /// with `prefix` before it. Tokenizing is CPU work, so it runs on the blocking pool.
    pub(super) async fn windows(
        &self,
        prefix: String,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<String>>, String> {
        let (dir, max, cell) = (self.dir.clone(), self.max_tokens, self.windower.clone());
        tokio::task::spawn_blocking(move || {
            let windower = cell
                .get_or_init(|| {
                    Tokenizer::from_file(dir.join("tokenizer.json"))
                        .map_err(|e| format!("{}/tokenizer.json: {e}", dir.display()))
                        .and_then(|t| Windower::new(t, max))
                })
                .as_ref()
                .map_err(Clone::clone)?;
            texts.iter().map(|t| windower.windows(&prefix, t)).collect()
        })
        .await
        .map_err(|e| format!("cutting texts into the model's windows: {e}"))?
    }

    /// One vector per text (not yet unit length), and the tokens the model read.
    pub(super) async fn embed(&self, texts: Vec<String>) -> Result<(Vec<Vec<f32>>, u64), String> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job { texts, reply })
            .map_err(|_| "the embedding thread has stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the embedding thread stopped during a job".to_string())?
    }
}

/// `None` when `dir` holds every required file, else a sentence naming what is missing.
pub(super) fn missing_files(dir: &Path) -> Option<String> {
    let missing: Vec<&str> = REQUIRED_FILES
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "the embedding model directory {} lacks {}",
            dir.display(),
            missing.join(", ")
        )
    })
}

/// The model thread: loads at the first job, answers every job, ends with the channel.
/// Jobs queued together (concurrent ingestions, a query behind them) run as one batch, up
/// to `COALESCE` texts. A load failure is kept and answered to every job, so a broken
/// directory costs one read.
fn serve(dir: &Path, queue: mpsc::Receiver<Job>) {
    let mut model: Option<Result<Model, String>> = None;
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        let mut queued = jobs[0].texts.len();
        while queued < COALESCE {
            match queue.try_recv() {
                Ok(job) => {
                    queued += job.texts.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let loaded = model.get_or_insert_with(|| {
            let started = std::time::Instant::now();
            let m = Model::load(dir);
            match &m {
                Ok(m) => tracing::info!(dir = %dir.display(), max_tokens = m.max_tokens,
                    ms = started.elapsed().as_millis() as u64, "local embedding model loaded"),
                Err(e) => {
                    tracing::warn!(error = %e, "the local embedding model could not be loaded")
                }
            }
            m
        });
        let texts: Vec<&str> = jobs
            .iter()
            .flat_map(|j| j.texts.iter().map(String::as_str))
            .collect();
        let result = match loaded {
            Ok(m) => m.embed(&texts),
            Err(e) => Err(e.clone()),
        };
        match result {
            Ok(embedded) => {
                let mut embedded = embedded.into_iter();
                for job in jobs {
                    let mine: Vec<(Vec<f32>, u64)> =
                        embedded.by_ref().take(job.texts.len()).collect();
                    let tokens = mine.iter().map(|(_, t)| t).sum();
                    let vectors = mine.into_iter().map(|(v, _)| v).collect();
                    let _ = job.reply.send(Ok((vectors, tokens)));
                }
            }
            Err(e) => {
                for job in jobs {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
}

struct Model {
    bert: Bert,
    tokenizer: Tokenizer,
    pooling: Pooling,
    max_tokens: usize,
}

impl Model {
    fn load(dir: &Path) -> Result<Model, String> {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .map_err(|e| format!("reading {}: {e}", dir.join(name).display()))
        };
        let config: Config = serde_json::from_str(&read("config.json")?)
            .map_err(|e| format!("{}/config.json is not a BERT config: {e}", dir.display()))?;
        let max_tokens = max_tokens(dir, Some(config.max_position_embeddings));
        let pooling = match read("1_Pooling/config.json")
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        {
            Some(p) if p["pooling_mode_cls_token"] == true => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| format!("{}/tokenizer.json: {e}", dir.display()))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| format!("tokenizer truncation: {e}"))?;
        // Padding is done here per batch, to the batch's longest text.
        tokenizer.with_padding(None);
        // Read into memory rather than mapped: a mapped file changed underneath would be
        // undefined behaviour, and the weights are copied into the model's buffers either way.
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| format!("reading {}/model.safetensors: {e}", dir.display()))?;
        let bert = Bert::load(&weights, &config)
            .map_err(|e| format!("loading the model in {}: {e}", dir.display()))?;
        Ok(Model {
            bert,
            tokenizer,
            pooling,
            max_tokens,
        })
    }

    /// One vector per text, in order, each with the tokens it was read as.
    fn embed(&self, texts: &[&str]) -> Result<Vec<(Vec<f32>, u64)>, String> {
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|e| format!("tokenizing: {e}"))?;
        // Sorted by length so that each forward pass pads little; answered in input order.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let lengths: Vec<usize> = order.iter().map(|&i| encodings[i].len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        for pass in passes(&lengths) {
            let batch = &order[pass];
            let vectors = self
                .forward(batch.iter().map(|&i| &encodings[i]))
                .map_err(|e| format!("running the embedding model: {e}"))?;
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out
            .into_iter()
            .zip(&encodings)
            .map(|(v, e)| (v, e.len() as u64))
            .collect())
    }

    /// Pooled last hidden states of one batch. No padding: `bert` runs the batch packed.
    fn forward<'e>(
        &self,
        batch: impl ExactSizeIterator<Item = &'e tokenizers::Encoding> + Clone,
    ) -> troupe_encoder::Result<Vec<Vec<f32>>> {
        let ids: Vec<&[u32]> = batch.map(|e| e.get_ids()).collect();
        let lengths: Vec<usize> = ids.iter().map(|t| t.len()).collect();
        let hidden = self.bert.forward(&ids)?;
        let width = self.bert.hidden();
        Ok(match self.pooling {
            Pooling::Cls => first_rows(&hidden, width, &lengths),
            Pooling::Mean => mean_rows(&hidden, width, &lengths),
        })
    }
}

/// The longest input of the model in `dir`: `sentence_bert_config.json`'s
/// `max_seq_length` (else 256), at most its position embeddings (`positions`, else read from
/// `config.json` when it can be).
fn max_tokens(dir: &Path, positions: Option<usize>) -> usize {
    let json = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
    };
    let positions = positions
        .or_else(|| {
            json("config.json")
                .and_then(|v| v["max_position_embeddings"].as_u64())
                .map(|n| n as usize)
        })
        .unwrap_or(usize::MAX);
    json("sentence_bert_config.json")
        .and_then(|v| v["max_seq_length"].as_u64())
        .map_or(DEFAULT_MAX_TOKENS, |n| n as usize)
        .clamp(8, positions.max(8))
}

/// `lengths` (ascending) cut into forward passes, in order: each as many texts as fit
/// `FORWARD_TOKENS` padded to its longest (its last), at most `FORWARD_ROWS`, at least one.
fn passes(lengths: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < lengths.len() {
        let mut end = start + 1;
        while end < lengths.len()
            && end - start < FORWARD_ROWS
            && (end + 1 - start) * lengths[end].max(1) <= FORWARD_TOKENS
        {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_every_text_in_order_within_the_budget() {
        // Short texts go many to a pass, long ones few; a text longer than the budget
        // still gets a pass of its own.
        let mut lengths: Vec<usize> = (0..300).map(|i| 8 + i % 40).collect();
        lengths.extend([256; 70]);
        lengths.push(FORWARD_TOKENS + 1);
        lengths.sort();
        let cut = passes(&lengths);
        let mut next = 0;
        for pass in &cut {
            assert_eq!(pass.start, next, "{cut:?}");
            assert!(!pass.is_empty());
            let rows = pass.len();
            let width = lengths[pass.end - 1];
            assert!(rows <= FORWARD_ROWS);
            assert!(
                rows == 1 || rows * width <= FORWARD_TOKENS,
                "{pass:?}: {rows} × {width}"
            );
            next = pass.end;
        }
        assert_eq!(next, lengths.len());
        // The 256-token texts go 32 to a pass, as before; the short ones far more.
        assert!(cut.iter().any(|p| p.len() == 32 && lengths[p.start] == 256));
        assert!(cut[0].len() > 32, "{cut:?}");
        assert!(passes(&[]).is_empty());
    }

    /// The real all-MiniLM-L6-v2 of `TROUPE_TEST_EMBEDDING_MODEL_DIR` (`.ci/run` installs
    /// it): without it the test is skipped here and fails under `CI=true`.
    #[allow(clippy::disallowed_methods)]
    fn real_model() -> Option<Model> {
        let dir = std::env::var("TROUPE_TEST_EMBEDDING_MODEL_DIR")
            .ok()
            .map(PathBuf::from)
            .filter(|d| d.join("model.safetensors").is_file());
        match dir {
            Some(dir) => Some(Model::load(&dir).expect("the real model loads")),
            None if troupe_e2e::env::in_ci() => {
                panic!("TROUPE_TEST_EMBEDDING_MODEL_DIR must name the MiniLM model under CI=true")
            }
            None => {
                eprintln!("skipped: TROUPE_TEST_EMBEDDING_MODEL_DIR is not set");
                None
            }
        }
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let (a, b) = (
            super::super::normalized(a.to_vec()),
            super::super::normalized(b.to_vec()),
        );
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// The forward is the model: the vectors of texts of 5 to 256 tokens (the last cut at
    /// the model's 256), embedded in one batch, equal ONNX Runtime's of the same weights
    /// (each text run alone there, so padding is on neither side), to a cosine of 0.9999.
    /// `bench/embeddings.py --reference` made testdata/minilm-reference.json.
    #[test]
    fn the_forward_matches_an_independent_engine() {
        let Some(model) = real_model() else { return };
        let reference: serde_json::Value =
            serde_json::from_str(include_str!("testdata/minilm-reference.json")).unwrap();
        let texts: Vec<&str> = reference["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let expected: Vec<Vec<f32>> = serde_json::from_value(reference["vectors"].clone()).unwrap();
        let got = model.embed(&texts).expect("embedded");
        for (i, ((vector, tokens), want)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(*tokens, reference["tokens"][i].as_u64().unwrap());
            let similarity = cosine(vector, want);
            println!("text {i} ({tokens} tokens): cosine {similarity:.6} to ONNX Runtime's");
            assert!(similarity >= 0.9999, "text {i}: cosine {similarity}");
        }
        assert_eq!(got.len(), texts.len());
    }

    /// A text's vector does not depend on what it is batched with: alone, or beside texts
    /// far longer than it (which pad it in attention), it is the same vector.
    #[test]
    fn padding_does_not_change_a_vector() {
        let Some(model) = real_model() else { return };
        let long = "Tugboats push the largest ships into their berths against the tide. ".repeat(6);
        let texts = ["tabby cat", long.as_str(), "dock workers", long.as_str()];
        let together = model.embed(&texts).expect("batch");
        for (text, (vector, _)) in texts.iter().zip(&together) {
            let alone = model.embed(&[text]).expect("alone");
            let similarity = cosine(vector, &alone[0].0);
            assert!(similarity >= 0.99999, "{text}: cosine {similarity}");
        }
        // And different texts are different vectors: the check above could not pass by
        // giving every text the same one.
        assert!(cosine(&together[0].0, &together[1].0) < 0.9);
    }

    #[test]
    fn a_directory_without_weights_is_named_with_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let why = Local::open(dir.path()).unwrap_err();
        assert!(why.contains("tokenizer.json, model.safetensors"), "{why}");
    }

    #[tokio::test]
    async fn broken_weights_answer_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        for f in REQUIRED_FILES {
            std::fs::write(dir.path().join(f), "not a model").unwrap();
        }
        let local = Local::open(dir.path()).unwrap();
        let err = local.embed(vec!["hello".into()]).await.unwrap_err();
        assert!(err.contains("config.json"), "{err}");
        // The failure is kept: the next job gets it too, without a panic.
        assert!(local.embed(vec!["again".into()]).await.is_err());
    }
}
