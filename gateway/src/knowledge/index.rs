//! The keyword index: BM25 over chunk text with English stemming, on tantivy, the same
//! engine for SQLite and Postgres.
//!
//! The database is the source of truth; this index is a cache of it on local disk
//! (`TROUPE_INDEX_DIR`, or in memory for tests and benchmarks), and can always be thrown away.
//! It follows the database through `knowledge_changes` (one row per stored or deleted
//! document, written in the same transaction as the chunks): [`KeywordIndex::sync`] replays
//! the rows after the last one it applied, which the index keeps in its commit payload, so
//! a restart resumes where it stopped. The payload also names the database (its
//! installation id), so an index that is missing, unreadable, written for another database,
//! or ahead of the database is rebuilt from `chunks`.
//!
//! Replaying is idempotent and needs no operation kind: for each changed document the index
//! drops what it has and adds the chunks the database has now (none for a deleted one). A
//! rebuild reads the head of the sequence before it reads the chunks, so a change made
//! during the rebuild is replayed after it.
//!
//! Several replicas each keep their own index and each run [`KeywordIndex::sync`] after
//! their own writes and on a timer (`TROUPE_INDEX_POLL_MS`); how far behind a replica is
//! shows in `/readyz` and in the `troupe_knowledge_index_lag` gauge.
//!
//! Ingest speed (issue 14) decides two things here:
//! - a document this process stored is *staged* from the chunks in hand
//!   ([`KeywordIndex::stage_own`]) when its change is the next one the index expects,
//!   instead of being read back from the database; otherwise the changes are replayed;
//! - staged chunks are committed lazily: by the next search (so an upload is found by the
//!   first search after it), by the next [`KeywordIndex::sync`] (the follow timer's), or
//!   once [`COMMIT_EVERY`] chunks are pending. A commit per document made one small
//!   segment per document, and merging those back together cost as much as indexing. A
//!   crash before the commit loses nothing: the payload's seq has not moved, so the changes
//!   are replayed.
//!
//! Terms come from [`EnStem`] (tantivy's `en_stem` tokens in one pass, stems remembered
//! per distinct word). Chunk text is analyzed by the writer's caller, off tantivy's one
//! indexing thread, and reaches the index as its terms ([`terms`]), which the field's
//! tokenizer ([`Terms`]) only splits: analyzing on that thread bound ingest speed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use troupe_connectors::sync::Locked;

use tantivy::collector::TopDocs;
use tantivy::directory::{Directory, DirectoryLock, Lock};
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::{TextAnalyzer, TokenStream};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

use troupe_connectors::AgentId;

use super::analyzer::{EnStem, Terms, terms};
use crate::storage::{IndexChunk, Scope, Store};

/// The index-time tokenizer of chunk text, which arrives analyzed (see the module
/// comment). A new name: an index written before, whose field took raw text under
/// `en_stem`, has another schema and is rebuilt.
const TOKENIZER: &str = "troupe_terms";
/// The writer's memory budget. One indexing thread: the machine is small, and one thread's
/// segments merge into fewer. 16 MiB, just over tantivy's floor (15 MB): the arena is held
/// from the first write for the process's life, and the gateway's peak memory under hostile uploads has a bound
/// (tests/tests/hostile.rs: 32 MiB put it over). A smaller arena flushes smaller segments
/// more often, which the merge policy folds together.
const WRITER_MEMORY: usize = 16 << 20;
/// Chunks read per page during a rebuild, and changes replayed per commit.
const PAGE: usize = 2_000;
/// Staged chunks that make a commit without waiting for a search or a sync: bounds what a
/// crash makes the next start replay (50,000 chunks, about 35 MB of text, a few seconds).
/// Not smaller: a commit drains tantivy's indexing thread and starts a new one, and
/// ingest stalled meanwhile; at 5,000 those stalls cost a fifth of ingest speed
/// (docs/benchmarks.md). The writer's memory does not grow between commits: its arena
/// ([`WRITER_MEMORY`]) is flushed into a segment whenever it is full.
const COMMIT_EVERY: usize = 50_000;
/// Documents whose chunks are read at once while replaying changes: bounds the memory of a
/// replay after a bulk load (2,000 changed documents of 1,000 chunks each would be 2M).
const REPLAY_DOCUMENTS: usize = 32;
/// A search first takes this many times the hits asked for (at least [`MIN_CANDIDATES`])
/// from the whole index, before it checks their place.
const CANDIDATES_FACTOR: usize = 4;
const MIN_CANDIDATES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("keyword index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("keyword index directory {path}: {why}")]
    Directory { path: String, why: String },
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error("keyword index task failed: {0}")]
    Task(String),
}

#[derive(Clone, Copy)]
struct Fields {
    chunk_id: Field,
    document_id: Field,
    /// The agent and the scope as one term (`agent\0scope`): a search filters on two terms.
    place: Field,
    text: Field,
}

/// How far the index has followed the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexStatus {
    /// The last change applied.
    pub applied: i64,
    /// The last change seen in the database.
    pub head: i64,
    /// `head - applied`: changes this replica has not applied yet.
    pub lag: i64,
    /// A rebuild from `chunks` is under way.
    pub rebuilding: bool,
    /// Chunks read so far by the rebuild under way (or the last one).
    pub rebuilt_chunks: i64,
}

pub struct KeywordIndex {
    index: Index,
    reader: IndexReader,
    /// tantivy's writer, made by the first write (`write`), not at open: it holds a
    /// 10,000-document queue and its threads from the start, 1.3 MiB that a gateway whose
    /// personas have no documents (or whose index is up to date) never used (issue 48).
    writer: Mutex<Option<IndexWriter>>,
    /// This process's claim on the directory, taken at open: a second process on the same
    /// directory is refused there, as when the writer was made at open.
    _claim: DirectoryLock,
    fields: Fields,
    /// The last change applied and committed (searchable); -1: the index must be rebuilt
    /// first.
    applied: AtomicI64,
    /// The last change the writer holds, committed or not (`>= applied`).
    staged: AtomicI64,
    /// Chunks added since the last commit; a search commits first when there are any.
    pending: AtomicUsize,
    /// The last change staged when the last [`Self::follow`] step ended: when a step starts
    /// from it, this process staged nothing in between (its uploads have paused).
    followed: AtomicI64,
    head: AtomicI64,
    rebuilding: AtomicBool,
    rebuilt_chunks: AtomicI64,
    /// The installation id of the database the index was built from (from the commit
    /// payload, then the store's once checked), written into every commit.
    database: Mutex<Option<String>>,
    /// Whether `database` has been checked against the store this process uses.
    checked: AtomicBool,
    /// One sync at a time (shared with a commit started in the background).
    sync: Arc<tokio::sync::Mutex<()>>,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    // Stored, not indexed: a hit is mapped to its chunk, never looked up by it. Indexed, it
    // was a unique term per chunk, which the term dictionary and every merge carried.
    let chunk_id = b.add_text_field("chunk_id", STORED);
    let document_id = b.add_text_field("document_id", STRING);
    // Stored too: a search ranks the whole index first and checks the place of its best
    // hits (see `search`).
    let place = b.add_text_field("place", STRING | STORED);
    // Frequencies without positions: BM25 needs no more, and there are no phrase queries.
    let text = b.add_text_field(
        "text",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqs),
        ),
    );
    (
        b.build(),
        Fields {
            chunk_id,
            document_id,
            place,
            text,
        },
    )
}

fn place(agent: &AgentId, scope: &Scope) -> String {
    format!("{agent}\u{0}{scope}")
}

impl KeywordIndex {
    /// An index in memory, built from the database at the first sync.
    pub fn in_memory() -> Result<Arc<Self>, IndexError> {
        let (schema, fields) = schema();
        Self::from_index(Index::create_in_ram(schema), fields, None, None)
    }

    /// The index in `dir`, created when missing. An index this version cannot read (another
    /// schema, a damaged directory) is removed and rebuilt: it is only a cache.
    pub fn open(dir: &Path) -> Result<Arc<Self>, IndexError> {
        match Self::open_dir(dir) {
            Ok(index) => Ok(index),
            Err(IndexError::Tantivy(tantivy::TantivyError::LockFailure(_, _))) => {
                Err(IndexError::Directory {
                    path: dir.display().to_string(),
                    why: "in use by another troupe process; give each replica its own \
                          TROUPE_INDEX_DIR"
                        .into(),
                })
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e,
                    "keyword index unreadable; removing it to rebuild from the database");
                std::fs::remove_dir_all(dir).map_err(|e| IndexError::Directory {
                    path: dir.display().to_string(),
                    why: e.to_string(),
                })?;
                Self::open_dir(dir)
            }
        }
    }

    fn open_dir(dir: &Path) -> Result<Arc<Self>, IndexError> {
        let directory = |e: String| IndexError::Directory {
            path: dir.display().to_string(),
            why: e,
        };
        std::fs::create_dir_all(dir).map_err(|e| directory(e.to_string()))?;
        let mmap =
            tantivy::directory::MmapDirectory::open(dir).map_err(|e| directory(e.to_string()))?;
        let (schema, fields) = schema();
        let index = Index::open_or_create(mmap, schema.clone())?;
        if index.schema() != schema {
            return Err(directory("written with another schema".into()));
        }
        // The payload is `seq installation-id`; anything else means: rebuild.
        let payload = index.load_metas()?.payload.unwrap_or_default();
        let (applied, database) = match payload.split_once(' ') {
            Some((seq, db)) => (seq.parse::<i64>().ok(), Some(db.to_string())),
            None => (None, None),
        };
        Self::from_index(index, fields, applied, database)
    }

    fn from_index(
        index: Index,
        fields: Fields,
        applied: Option<i64>,
        database: Option<String>,
    ) -> Result<Arc<Self>, IndexError> {
        // Registered before the writer, which takes it per segment.
        index
            .tokenizers()
            .register(TOKENIZER, TextAnalyzer::from(Terms::default()));
        let claim = index
            .directory()
            .acquire_lock(&Lock {
                filepath: std::path::PathBuf::from(".troupe-index.lock"),
                is_blocking: false,
            })
            .map_err(|e| tantivy::TantivyError::LockFailure(e, None))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Arc::new(KeywordIndex {
            index,
            reader,
            writer: Mutex::new(None),
            _claim: claim,
            fields,
            applied: AtomicI64::new(applied.unwrap_or(-1)),
            staged: AtomicI64::new(applied.unwrap_or(-1)),
            pending: AtomicUsize::new(0),
            followed: AtomicI64::new(-1),
            head: AtomicI64::new(0),
            rebuilding: AtomicBool::new(false),
            rebuilt_chunks: AtomicI64::new(0),
            database: Mutex::new(database),
            checked: AtomicBool::new(false),
            sync: Arc::new(tokio::sync::Mutex::new(())),
        }))
    }

    pub fn status(&self) -> IndexStatus {
        let applied = self.applied.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        IndexStatus {
            applied,
            head,
            lag: (head - applied.max(0)).max(0),
            rebuilding: self.rebuilding.load(Ordering::Relaxed),
            rebuilt_chunks: self.rebuilt_chunks.load(Ordering::Relaxed),
        }
    }

    /// Whether the index has been built for this database (it may still lag behind).
    pub fn is_built(&self) -> bool {
        self.checked.load(Ordering::Relaxed) && self.applied.load(Ordering::Relaxed) >= 0
    }

    /// Waits for the staging running in the background (it holds `sync`), without
    /// committing it: a test that drops the index as a crash would must first let go of
    /// the writer, or reopening the directory finds it locked.
    #[cfg(test)]
    pub async fn staging_done(&self) {
        drop(self.sync.lock().await);
    }

    /// Whether the writer has been made (`write`).
    #[cfg(test)]
    pub fn has_writer(&self) -> bool {
        self.writer.locked().is_some()
    }

    /// Whether chunks were added that a search cannot see yet.
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed) > 0
    }

    /// Brings the index up to the database and commits: rebuilds it when it has to, then
    /// replays the changes after the last staged. Returns the last change applied.
    pub async fn sync(self: &Arc<Self>, store: &Store) -> Result<i64, IndexError> {
        let _one = self.sync.lock().await;
        let applied = self.replay(store).await?;
        self.commit_staged().await?;
        Ok(applied)
    }

    /// The follow timer's step: replays other writers' changes and commits them, so they
    /// reach this replica's results. This process's own staging is committed only once it
    /// has paused for a whole step (or by [`COMMIT_EVERY`], or by the next search, which
    /// commits what is pending): a commit per step during a long upload stalled it every
    /// time (see `stage_own`).
    pub async fn follow(self: &Arc<Self>, store: &Store) -> Result<i64, IndexError> {
        let _one = self.sync.lock().await;
        let before = self.staged.load(Ordering::Relaxed);
        let applied = self.replay(store).await?;
        let paused = self.followed.swap(applied, Ordering::Relaxed) == before;
        if applied != before || paused || self.pending.load(Ordering::Relaxed) >= COMMIT_EVERY {
            self.commit_staged().await?;
        }
        Ok(applied)
    }

    /// Commits what is staged, if anything: for a search, which must see every upload that
    /// returned before it.
    pub async fn commit_pending(self: &Arc<Self>) -> Result<(), IndexError> {
        if !self.has_pending() {
            return Ok(());
        }
        let _one = self.sync.lock().await;
        self.commit_staged().await
    }

    /// A document this process just stored: change `seq`, whose chunks are in hand. When
    /// it is the change after the last staged one, its chunks go to the writer as they are;
    /// otherwise (another writer's change came between, or the index is not built) the
    /// changes are replayed from the database, this one with them. Committed lazily (see
    /// the module comment).
    pub async fn stage_own(
        self: &Arc<Self>,
        store: &Store,
        seq: i64,
        document_id: String,
        place_of: (&AgentId, &Scope),
        (chunks, given): (Vec<(String, String)>, Vec<String>),
    ) -> Result<(), IndexError> {
        let one = Arc::clone(&self.sync).lock_owned().await;
        let staged = self.staged.load(Ordering::Relaxed);
        if !self.is_built() || seq != staged + 1 {
            if seq > staged {
                self.replay(store).await?;
            }
            if self.pending.load(Ordering::Relaxed) >= COMMIT_EVERY {
                self.commit_staged().await?;
            }
            return Ok(());
        }
        // The chunks go to the writer in the background, still holding `sync`, and the
        // caller goes on to read and store its next document meanwhile: one document is
        // read while the one before is analyzed and the one before that indexed, on as
        // many cores. Only the next staging waits for this one. Counted as pending first,
        // so that a search (which waits for `sync`) commits it: an upload is found by the
        // first search after it returns.
        self.staged.store(seq, Ordering::Relaxed);
        self.head.fetch_max(seq, Ordering::Relaxed);
        self.pending.fetch_add(chunks.len(), Ordering::Relaxed);
        let place = place(place_of.0, place_of.1);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let index = Arc::clone(&this);
            let added = blocking(move || {
                index.write(|writer| {
                    // No delete of the document first: its row is new (the insert would
                    // have found it otherwise), and a delete of an earlier copy was replayed
                    // before this change, since this one is the next. A delete per document
                    // cost the indexing thread a term query per segment flush.
                    // Each chunk's text is let go once analyzed into its tantivy document,
                    // so a large upload is not held twice (the gateway's peak memory,
                    // tests/hostile.rs). Terms the reader gave are used as they are; without
                    // them (a worker's chunks) each chunk is analyzed here.
                    let mut given = given.into_iter();
                    for (id, text) in chunks {
                        let terms = given.next().unwrap_or_else(|| terms(&text));
                        writer.add_document(index.document(&id, &document_id, &place, terms))?;
                    }
                    Ok(())
                })
            })
            .await;
            let result = match added {
                // The next sync replays this change (and drops whatever part was added).
                Err(e) => {
                    this.staged.store(staged, Ordering::Relaxed);
                    Err(e)
                }
                Ok(()) if this.pending.load(Ordering::Relaxed) >= COMMIT_EVERY => {
                    this.commit_staged().await
                }
                Ok(()) => Ok(()),
            };
            // The caller has moved on: a failure is logged, and the changes are replayed.
            if let Err(e) = result {
                tracing::warn!(error = %e, "keyword index update failed; it will catch up");
            }
            // This task's hold on the index goes before `sync` is let go: whoever waited
            // for `sync` (`staging_done`, then a drop as a crash would) must find the
            // writer, and the directory lock with it, released once it drops its own.
            drop(this);
            drop(one);
        });
        Ok(())
    }

    /// Commits the staged changes when there are any; the caller holds `sync`.
    async fn commit_staged(self: &Arc<Self>) -> Result<(), IndexError> {
        if !self.has_pending() {
            return Ok(());
        }
        let staged = self.staged.load(Ordering::Relaxed);
        let this = Arc::clone(self);
        let result = blocking(move || this.commit(staged)).await;
        if result.is_err() {
            // The writer dropped what it held: replay it from the database next time.
            self.staged
                .store(self.applied.load(Ordering::Relaxed), Ordering::Relaxed);
            self.pending.store(0, Ordering::Relaxed);
        }
        result
    }

    /// Rebuilds the index when it has to, then stages the changes after the last staged,
    /// without committing; the caller holds `sync`. Returns the last change staged.
    async fn replay(self: &Arc<Self>, store: &Store) -> Result<i64, IndexError> {
        if !self.checked.load(Ordering::Relaxed) {
            let id = store.installation_id().await?;
            let mut database = self.database.locked();
            if database.as_deref() != Some(id.as_str()) {
                if database.is_some() {
                    tracing::info!("keyword index was built for another database; rebuilding");
                }
                self.applied.store(-1, Ordering::Relaxed);
                *database = Some(id);
            }
            self.checked.store(true, Ordering::Relaxed);
        }
        let mut applied = self.staged.load(Ordering::Relaxed);
        let head = store.last_knowledge_change().await?;
        self.head.store(head, Ordering::Relaxed);
        if applied < 0 || applied > head {
            applied = self.rebuild(store, head).await?;
        }
        loop {
            let changes = store.knowledge_changes_after(applied, PAGE).await?;
            let Some(&(last, _)) = changes.last() else {
                break;
            };
            let mut documents: Vec<String> = changes.into_iter().map(|(_, d)| d).collect();
            documents.sort();
            documents.dedup();
            for group in documents.chunks(REPLAY_DOCUMENTS) {
                let chunks = store.chunks_of_documents(group).await?;
                let group = group.to_vec();
                let this = Arc::clone(self);
                let n = chunks.len();
                blocking(move || {
                    this.write(|writer| {
                        for d in &group {
                            writer.delete_term(Term::from_field_text(this.fields.document_id, d));
                        }
                        this.add(writer, &chunks)
                    })
                })
                .await?;
                // A delete is pending too: it must reach the next search.
                self.pending.fetch_add(n.max(1), Ordering::Relaxed);
            }
            applied = last;
            self.staged.store(last, Ordering::Relaxed);
            self.head.fetch_max(last, Ordering::Relaxed);
        }
        Ok(applied)
    }

    /// Drops everything and indexes every chunk of the database, as of change `head`.
    async fn rebuild(self: &Arc<Self>, store: &Store, head: i64) -> Result<i64, IndexError> {
        tracing::info!(head, "building the keyword index from the database");
        self.rebuilding.store(true, Ordering::Relaxed);
        self.rebuilt_chunks.store(0, Ordering::Relaxed);
        // An empty index, with nothing staged, rebuilt from a database without chunks (a
        // gateway's first start) changes nothing: it is not written, and no writer is made.
        let was_empty = self.writer.locked().is_none() && self.reader.searcher().num_docs() == 0;
        let result = async {
            if !was_empty {
                self.write(|writer| {
                    writer.delete_all_documents()?;
                    Ok(())
                })?;
            }
            let mut after = 0;
            loop {
                let page = store.chunks_after(after, PAGE).await?;
                let Some(last) = page.last() else {
                    break;
                };
                after = last.seq;
                let n = page.len() as i64;
                let this = Arc::clone(self);
                blocking(move || this.write(|writer| this.add(writer, &page))).await?;
                self.rebuilt_chunks.fetch_add(n, Ordering::Relaxed);
            }
            if was_empty && self.rebuilt_chunks.load(Ordering::Relaxed) == 0 {
                self.applied.store(head, Ordering::Relaxed);
                self.staged.store(head, Ordering::Relaxed);
                return Ok(head);
            }
            let this = Arc::clone(self);
            blocking(move || this.commit(head)).await?;
            Ok::<_, IndexError>(head)
        }
        .await;
        self.rebuilding.store(false, Ordering::Relaxed);
        if result.is_err() {
            // Nothing half-built is committed: the index stays as it was, to rebuild again.
            if let Some(writer) = self.writer.locked().as_mut()
                && let Err(e) = writer.rollback()
            {
                tracing::warn!(error = %e, "keyword index: could not roll back a failed rebuild");
            }
            self.staged
                .store(self.applied.load(Ordering::Relaxed), Ordering::Relaxed);
            self.pending.store(0, Ordering::Relaxed);
        } else {
            tracing::info!(
                chunks = self.rebuilt_chunks.load(Ordering::Relaxed),
                "keyword index built"
            );
        }
        result
    }

    /// Runs `work` with the writer, made first if this is the first write.
    fn write<T>(
        &self,
        work: impl FnOnce(&mut IndexWriter) -> Result<T, IndexError>,
    ) -> Result<T, IndexError> {
        let mut writer = self.writer.locked();
        let writer = match &mut *writer {
            Some(writer) => writer,
            None => writer.insert(self.index.writer_with_num_threads(1, WRITER_MEMORY)?),
        };
        work(writer)
    }

    fn add(&self, writer: &IndexWriter, chunks: &[IndexChunk]) -> Result<(), IndexError> {
        for c in chunks {
            let place = place(&c.agent_id, &c.scope);
            writer.add_document(self.document(&c.id, &c.document_id, &place, terms(&c.text)))?;
        }
        Ok(())
    }

    /// One chunk as the index holds it: its text field holds its terms.
    fn document(
        &self,
        chunk_id: &str,
        document_id: &str,
        place: &str,
        terms: String,
    ) -> TantivyDocument {
        let f = self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.chunk_id, chunk_id);
        doc.add_text(f.document_id, document_id);
        doc.add_text(f.place, place);
        doc.add_text(f.text, terms);
        doc
    }

    /// Commits with the last applied change as the payload, and makes it searchable.
    fn commit(&self, applied: i64) -> Result<(), IndexError> {
        let database = self.database.locked().clone().unwrap_or_default();
        self.write(|writer| {
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&format!("{applied} {database}"));
            prepared.commit()?;
            Ok(())
        })?;
        self.reader.reload()?;
        self.applied.store(applied, Ordering::Relaxed);
        self.staged.store(applied, Ordering::Relaxed);
        self.pending.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// The best `limit` chunks of `agent` in `scope` and the agent-wide ones for `terms`
    /// (plain words, any of which may match), by BM25: `(chunk id, score)`, best first.
    pub fn search(
        &self,
        agent: &AgentId,
        scope: &Scope,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(String, f64)>, IndexError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let words = stems(terms);
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let text = BooleanQuery::new(any_of(
            self.fields.text,
            &words,
            IndexRecordOption::WithFreqs,
        ));
        let mut places = vec![place(agent, &Scope::AGENT)];
        if scope.room().is_some() {
            places.push(place(agent, scope));
        }
        let searcher = self.reader.searcher();
        if let Some(found) = self.best_anywhere(&searcher, &text, &places, limit)? {
            return Ok(found);
        }
        self.best_within(&searcher, text, &places, limit)
    }

    /// The first pass: the words alone. A union of terms is what block-max WAND prunes, so
    /// this reads a small part of long posting lists. When enough of its best hits are in
    /// `places`, they are the place's best hits too (any other hit in the place scores below
    /// all of them); `None` when they are not enough to tell.
    fn best_anywhere(
        &self,
        searcher: &Searcher,
        text: &BooleanQuery,
        places: &[String],
        limit: usize,
    ) -> Result<Option<Vec<(String, f64)>>, IndexError> {
        let f = self.fields;
        let wanted = limit.saturating_mul(CANDIDATES_FACTOR).max(MIN_CANDIDATES);
        let top = searcher.search(text, &TopDocs::with_limit(wanted).order_by_score())?;
        let mut out = Vec::with_capacity(limit);
        for &(score, address) in &top {
            let doc: TantivyDocument = searcher.doc(address)?;
            let here = doc
                .get_first(f.place)
                .and_then(|v| v.as_str())
                .is_some_and(|p| places.iter().any(|w| w == p));
            if let (true, Some(id)) = (here, doc.get_first(f.chunk_id).and_then(|v| v.as_str())) {
                out.push((id.to_string(), f64::from(score)));
                if out.len() == limit {
                    return Ok(Some(out));
                }
            }
        }
        // Fewer than asked for: the words matched nothing more, so every hit in the place
        // was seen.
        Ok((top.len() < wanted).then_some(out))
    }

    /// The second pass, when the place holds few of the best hits (an agent among many):
    /// the words within `places`, every match scored.
    fn best_within(
        &self,
        searcher: &Searcher,
        text: BooleanQuery,
        places: &[String],
        limit: usize,
    ) -> Result<Vec<(String, f64)>, IndexError> {
        let f = self.fields;
        let places = BooleanQuery::new(any_of(f.place, places, IndexRecordOption::Basic));
        // The scope filter scores nothing, so the ranking is BM25 over the text alone.
        let query = BooleanQuery::new(vec![
            (Occur::Must, Box::new(text) as Box<dyn Query>),
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(places), 0.0)),
            ),
        ]);
        let top = searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            if let Some(id) = doc.get_first(f.chunk_id).and_then(|v| v.as_str()) {
                out.push((id.to_string(), f64::from(score)));
            }
        }
        Ok(out)
    }
}

/// The analyzer's stems of `terms`, sorted, each once.
fn stems(terms: &[String]) -> Vec<String> {
    let mut analyzer = TextAnalyzer::from(EnStem::default());
    let mut words: Vec<String> = Vec::new();
    for term in terms {
        let mut stream = analyzer.token_stream(term);
        while let Some(token) = stream.next() {
            words.push(token.text.clone());
        }
    }
    words.sort();
    words.dedup();
    words
}

/// A query clause per value of `field`, any of which may match.
fn any_of(
    field: Field,
    values: &[String],
    record: IndexRecordOption,
) -> Vec<(Occur, Box<dyn Query>)> {
    values
        .iter()
        .map(|v| {
            let q: Box<dyn Query> =
                Box::new(TermQuery::new(Term::from_field_text(field, v), record));
            (Occur::Should, q)
        })
        .collect()
}

/// Runs tantivy's blocking work (writes, commits with their fsyncs) off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, IndexError> + Send + 'static,
) -> Result<T, IndexError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| IndexError::Task(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seq: i64, agent: &str, text: &str) -> IndexChunk {
        IndexChunk {
            seq,
            id: format!("{agent}-doc:{seq}"),
            document_id: format!("{agent}-doc"),
            agent_id: AgentId::new(agent),
            scope: Scope::AGENT,
            text: text.to_string(),
        }
    }

    /// Chunks and queries are analyzed into the same stems (the analyzer's equality with
    /// the stock chain is tested in `analyzer`): a query's inflection finds a chunk's other
    /// one, and BM25 prefers the chunk where the stem is denser.
    #[test]
    fn chunks_and_queries_are_analyzed_into_stems() {
        let index = KeywordIndex::in_memory().unwrap();
        let chunks = vec![
            chunk(1, "ada", "Lighthouses' KEEPERS, running!"),
            chunk(
                2,
                "ada",
                "The keeper of a lighthouse and a long, long road home.",
            ),
            chunk(3, "ada", "otters sleep holding hands"),
        ];
        index.write(|writer| index.add(writer, &chunks)).unwrap();
        index.commit(1).unwrap();
        let ada = AgentId::new("ada");
        let hits = index
            .search(
                &ada,
                &Scope::AGENT,
                &["keepers".into(), "lighthouse".into()],
                5,
            )
            .unwrap();
        let ids: Vec<&str> = hits.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["ada-doc:1", "ada-doc:2"]);
        assert!(hits[0].1 > hits[1].1);
        let none = index
            .search(&ada, &Scope::AGENT, &["keepsake".into()], 5)
            .unwrap();
        assert!(none.is_empty());
    }

    /// When most of the best matches belong to another agent, the search still finds the
    /// agent's own, in BM25 order, and nothing of the other's.
    #[test]
    fn a_search_finds_its_own_place_under_many_better_matches_elsewhere() {
        let index = KeywordIndex::in_memory().unwrap();
        let mut chunks: Vec<IndexChunk> = (0..200)
            .map(|i| chunk(i, "crowd", "lighthouse lighthouse lighthouse keeper"))
            .collect();
        chunks.push(chunk(
            1000,
            "ada",
            "a lighthouse on the rocks, far out at sea",
        ));
        chunks.push(chunk(1001, "ada", "the lighthouse lighthouse of the bay"));
        chunks.push(chunk(1002, "ada", "otters sleep holding hands"));
        index.write(|writer| index.add(writer, &chunks)).unwrap();
        index.commit(1).unwrap();

        let terms = vec!["lighthouse".to_string()];
        let ada = AgentId::new("ada");
        let hits = index.search(&ada, &Scope::AGENT, &terms, 5).unwrap();
        let ids: Vec<&str> = hits.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["ada-doc:1001", "ada-doc:1000"]);
        assert!(hits[0].1 > hits[1].1);

        // The crowd's own search is answered from the first, pruned pass.
        let crowd = index
            .search(&AgentId::new("crowd"), &Scope::AGENT, &terms, 5)
            .unwrap();
        assert_eq!(crowd.len(), 5);
        assert!(crowd.iter().all(|(id, _)| id.starts_with("crowd-")));
        assert!(
            index
                .search(&AgentId::new("nobody"), &Scope::AGENT, &terms, 5)
                .unwrap()
                .is_empty()
        );
    }
}
