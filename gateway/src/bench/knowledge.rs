//! `troupe bench --knowledge-mb N`: what knowledge costs. It writes a synthetic corpus of N
//! megabytes (markdown files of about 512 KiB, words drawn from a skewed vocabulary so
//! that terms have realistic document frequencies), ingests it through the same
//! `Knowledge::ingest` that uploads and `troupe ingest` use, and reports
//!
//! - ingestion speed in MB/s (extraction, chunking, hashing, indexing, commit), with
//!   `--knowledge-parallel` documents in flight at once (default 1);
//! - the process's peak resident memory while ingesting (Linux: the high-water mark is reset
//!   just before, through `/proc/self/clear_refs`);
//! - search latency, p50 and p99, over the resulting chunks (BM25 only, unless an
//!   embedding model is configured).
//!
//! With `--knowledge-sandbox`, documents are read by `troupe extract` workers (this
//! executable) as the gateway reads them, and the keyword index is on disk, in the
//! temporary directory, as the gateway keeps it; without it, in this process and in memory.
//!
//! `troupe bench --knowledge-chunks N` measures search at a size no ingest in a benchmark
//! can reach quickly: it writes N generated chunks (60 to 140 words each, the same skewed
//! vocabulary) straight into the database, 1,000 per document, builds the on-disk keyword
//! index from them as a new replica would, and times the same searches through the same
//! `Knowledge::search`, reporting the resident memory while searching.
//!
//! The corpus is generated rather than shipped: 100 MB of fixtures would not belong in the
//! repository, and a fixed seed makes every run see the same text.

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::stats::{pct, rss_kib};
use crate::knowledge::{Knowledge, KnowledgeSettings};
use crate::storage::{NewDocument, Scope, Store};
use troupe_connectors::AgentId;

const FILE_BYTES: usize = 512 * 1024;
const VOCABULARY: usize = 30_000;

/// Chunks per generated document (`--knowledge-chunks`).
const GENERATED_PER_DOCUMENT: usize = 1_000;

pub struct KnowledgeBench {
    /// `--knowledge-mb`: ingest this many megabytes.
    pub megabytes: usize,
    /// `--knowledge-chunks`: instead, store this many generated chunks.
    pub chunks: Option<usize>,
    pub queries: usize,
    pub database_url: Option<String>,
    /// `--knowledge-sandbox`: read documents in workers, index on disk (the gateway's way).
    pub sandbox: bool,
    /// `--knowledge-parallel`: documents ingested at once.
    pub parallel: usize,
}

pub async fn run(args: KnowledgeBench) -> anyhow::Result<ExitCode> {
    if let Some(chunks) = args.chunks {
        return run_generated(args, chunks).await;
    }
    let dir = tempfile::tempdir()?;
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus)?;
    let words = vocabulary();
    let mut rng = StdRng::seed_from_u64(7);
    let total = write_corpus(&corpus, args.megabytes * 1_000_000, &words, &mut rng)?;
    eprintln!(
        "corpus: {:.1} MB in {}",
        total as f64 / 1e6,
        corpus.display()
    );

    let url = database_url(&args, dir.path());
    let knowledge = open_knowledge(&url, dir.path(), args.sandbox).await?;
    // Built (empty) first, as the gateway does at start: each ingest then updates the
    // keyword index too, and is timed with it.
    knowledge.sync_index().await?;
    let agent = AgentId::new("bench");
    let ingest = ingest_corpus(&knowledge, &agent, &corpus, args.parallel.max(1)).await?;
    report_ingest(&args, &url, total, &ingest);
    search(
        &knowledge,
        &agent,
        &words,
        &mut rng,
        args.queries,
        ingest.chunks,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// `--database-url`, or a fresh SQLite file in the benchmark's temporary directory.
fn database_url(args: &KnowledgeBench, dir: &Path) -> String {
    args.database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("bench.db").display()))
}

/// The knowledge store under test: with `sandbox`, as the gateway has it (documents read by
/// workers, the index on disk in `dir`); else in this process and in memory.
async fn open_knowledge(url: &str, dir: &Path, sandbox: bool) -> anyhow::Result<Knowledge> {
    let store = Store::connect(url).await?;
    Ok(if sandbox {
        let settings = KnowledgeSettings {
            index_dir: dir.join("index"),
            ..KnowledgeSettings::default()
        };
        Knowledge::from_settings(store, &settings)
    } else {
        Knowledge::new(store, KnowledgeSettings::default(), None)
    })
}

/// What ingesting the corpus took.
struct Ingest {
    files: usize,
    chunks: usize,
    time: Duration,
    /// Resident memory before, and its peak while ingesting, in KiB.
    rss_before: u64,
    peak: u64,
}

/// Ingests every file of `corpus`, `parallel` at a time, as that many uploads would be, until
/// it is searchable.
async fn ingest_corpus(
    knowledge: &Knowledge,
    agent: &AgentId,
    corpus: &Path,
    parallel: usize,
) -> anyhow::Result<Ingest> {
    reset_peak_rss();
    let rss_before = rss_kib("VmRSS");
    let started = Instant::now();
    let mut chunks = 0usize;
    let mut files: Vec<_> = std::fs::read_dir(corpus)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut ingests = futures::stream::iter(files.iter().map(|path| async move {
        let bytes = tokio::fs::read(path).await?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ingested = knowledge
            .ingest(agent, None, &name, Some("text/markdown"), &bytes)
            .await?;
        anyhow::Ok(ingested.chunks)
    }))
    .buffer_unordered(parallel);
    while let Some(n) = ingests.next().await {
        chunks += n?;
    }
    drop(ingests);
    // Searchable, not only stored: the index's last commit is part of the ingest.
    knowledge.sync_index().await?;
    Ok(Ingest {
        files: files.len(),
        chunks,
        time: started.elapsed(),
        rss_before,
        peak: rss_kib("VmHWM"),
    })
}

/// Prints the ingest's speed and memory, `total` bytes in all.
fn report_ingest(args: &KnowledgeBench, url: &str, total: usize, ingest: &Ingest) {
    let mb = total as f64 / 1e6;
    println!(
        "knowledge benchmark ({}{})",
        store_kind(url),
        if args.sandbox {
            ", documents read by troupe extract workers, index on disk"
        } else {
            ", documents read in process, index in memory"
        }
    );
    println!(
        "  ingest:  {mb:.1} MB, {} files ({} at a time), {} chunks in {:.1} s = {:.1} MB/s",
        ingest.files,
        args.parallel.max(1),
        ingest.chunks,
        ingest.time.as_secs_f64(),
        mb / ingest.time.as_secs_f64()
    );
    println!(
        "  memory:  resident {:.1} MiB before ingesting, peak {:.1} MiB while ingesting",
        ingest.rss_before as f64 / 1024.0,
        ingest.peak as f64 / 1024.0
    );
}

/// Times `queries` searches of three words drawn from the vocabulary, and prints them.
async fn search(
    knowledge: &Knowledge,
    agent: &AgentId,
    words: &[String],
    rng: &mut StdRng,
    queries: usize,
    chunks: usize,
) -> anyhow::Result<()> {
    let mut latencies = Vec::with_capacity(queries);
    let mut hits = 0usize;
    for _ in 0..queries {
        let query = (0..3)
            .map(|_| words[pick(rng)].as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let started = Instant::now();
        hits += knowledge.search(agent, None, &query, 8).await?.len();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "  search:  {} queries over {chunks} chunks (top 8, {:.1} hits on average): p50 {}, p99 {}, max {}",
        latencies.len(),
        hits as f64 / latencies.len().max(1) as f64,
        ms(pct(&latencies, 0.50)),
        ms(pct(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    Ok(())
}

/// `--knowledge-chunks`: generated chunks stored directly, the index built from them, then
/// the same searches.
async fn run_generated(args: KnowledgeBench, total: usize) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let url = database_url(&args, dir.path());
    let store = Store::connect(&url).await?;
    let words = vocabulary();
    let mut rng = StdRng::seed_from_u64(7);
    let agent = AgentId::new("bench");
    let started = Instant::now();
    let generated = store_generated(&store, &agent, total, &words, &mut rng).await?;
    let store_time = started.elapsed();

    // A new replica: an empty index directory, built from the database at the first sync.
    let settings = KnowledgeSettings {
        index_dir: dir.path().join("index"),
        ..KnowledgeSettings::default()
    };
    let knowledge = Knowledge::with_index_dir(store, settings, None)?;
    reset_peak_rss();
    let started = Instant::now();
    knowledge.sync_index().await?;
    let index_time = started.elapsed();
    let index_peak = rss_kib("VmHWM");

    println!(
        "knowledge benchmark ({}, generated chunks, index on disk)",
        store_kind(&url)
    );
    println!(
        "  stored:  {} chunks ({:.1} MB of text) in {} documents in {:.1} s",
        generated.chunks,
        generated.bytes as f64 / 1e6,
        generated.documents,
        store_time.as_secs_f64()
    );
    println!(
        "  index:   built from the database in {:.1} s, peak resident {:.1} MiB meanwhile",
        index_time.as_secs_f64(),
        index_peak as f64 / 1024.0
    );
    reset_peak_rss();
    search(
        &knowledge,
        &agent,
        &words,
        &mut rng,
        args.queries,
        generated.chunks,
    )
    .await?;
    println!(
        "  memory:  resident {:.1} MiB after searching, peak {:.1} MiB while searching",
        rss_kib("VmRSS") as f64 / 1024.0,
        rss_kib("VmHWM") as f64 / 1024.0
    );
    Ok(ExitCode::SUCCESS)
}

/// What [`store_generated`] stored.
struct Generated {
    chunks: usize,
    /// Of chunk text.
    bytes: usize,
    documents: usize,
}

/// Stores `total` generated chunks for `agent`, [`GENERATED_PER_DOCUMENT`] per document,
/// straight into the database.
async fn store_generated(
    store: &Store,
    agent: &AgentId,
    total: usize,
    words: &[String],
    rng: &mut StdRng,
) -> anyhow::Result<Generated> {
    let scope = Scope::AGENT;
    let mut bytes = 0usize;
    let mut stored = 0usize;
    let mut document = 0usize;
    while stored < total {
        let id = format!("generated{document:06}");
        let chunks: Vec<(String, String)> = (0..GENERATED_PER_DOCUMENT.min(total - stored))
            .map(|i| (format!("{id}:{i}"), passage(words, rng)))
            .collect();
        bytes += chunks.iter().map(|(_, t)| t.len()).sum::<usize>();
        store
            .insert_document(&NewDocument {
                id: &id,
                agent_id: agent,
                scope: &scope,
                source: &format!("{id}.md"),
                content_type: "text/markdown",
                content_hash: &id,
                origin: "cli",
                bytes: 0,
                chunks: &chunks,
            })
            .await?;
        stored += chunks.len();
        document += 1;
    }
    Ok(Generated {
        chunks: stored,
        bytes,
        documents: document,
    })
}

/// One generated chunk: sentences of 6 to 20 words, 60 to 140 words in all.
fn passage(words: &[String], rng: &mut StdRng) -> String {
    let target = rng.random_range(60..140);
    let mut out = String::new();
    let mut n = 0;
    while n < target {
        let len = rng.random_range(6..20).min(target - n).max(1);
        for i in 0..len {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&words[pick(rng)]);
            if i + 1 == len {
                out.push('.');
            }
        }
        n += len;
    }
    out
}

fn store_kind(url: &str) -> &'static str {
    if url.starts_with("sqlite:") {
        "SQLite, tantivy BM25"
    } else {
        "Postgres, tantivy BM25"
    }
}

/// Pronounceable, distinct words: syllables in base 24.
fn vocabulary() -> Vec<String> {
    const SYLLABLES: [&str; 24] = [
        "ka", "to", "ri", "mu", "sel", "van", "dor", "pi", "qua", "len", "bo", "fi", "gar", "hu",
        "ne", "os", "tra", "ul", "ve", "wen", "xi", "yo", "zed", "ar",
    ];
    (0..VOCABULARY)
        .map(|mut i| {
            let mut w = String::new();
            loop {
                w.push_str(SYLLABLES[i % SYLLABLES.len()]);
                i /= SYLLABLES.len();
                if i == 0 {
                    break;
                }
            }
            w
        })
        .collect()
}

/// A word index with a skewed (roughly Zipfian) distribution: small indices are common.
fn pick(rng: &mut StdRng) -> usize {
    let u: f64 = rng.random_range(0.0..1.0);
    ((VOCABULARY as f64).powf(u) - 1.0) as usize % VOCABULARY
}

/// Writes markdown files until `bytes` are written; returns the bytes written.
fn write_corpus(
    dir: &Path,
    bytes: usize,
    words: &[String],
    rng: &mut StdRng,
) -> anyhow::Result<usize> {
    let mut written = 0;
    let mut file_no = 0;
    while written < bytes {
        let path = dir.join(format!("doc-{file_no:05}.md"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut size = 0;
        let mut section = 0;
        while size < FILE_BYTES.min(bytes - written) {
            let mut para = String::new();
            if size == 0 || rng.random_range(0..8) == 0 {
                section += 1;
                para.push_str(&format!("## Section {section} {}\n\n", words[pick(rng)]));
            }
            for _ in 0..rng.random_range(3..9) {
                let len = rng.random_range(6..20);
                for i in 0..len {
                    let w = &words[pick(rng)];
                    if i == 0 {
                        let mut c = w.chars();
                        if let Some(f) = c.next() {
                            para.extend(f.to_uppercase());
                            para.push_str(c.as_str());
                        }
                    } else {
                        para.push(' ');
                        para.push_str(w);
                    }
                }
                para.push_str(". ");
            }
            para.push_str("\n\n");
            out.write_all(para.as_bytes())?;
            size += para.len();
        }
        out.flush()?;
        written += size;
        file_no += 1;
    }
    Ok(written)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Resets the peak-RSS high-water mark (Linux ≥ 4.0); elsewhere a no-op.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
