//! The vector index: the dense candidates of a search without scoring every stored vector.
//!
//! Two paths, chosen once per process at the first sync and logged:
//! - **pgvector** (Postgres with the `vector` extension available, unless `TROUPE_PGVECTOR`
//!   is off): the database answers through one HNSW index per model and size
//!   (storage/pgvector.rs). This index only fills the typed `embedding` column from the
//!   stored bytes, following `embedding_changes`, and makes sure the HNSW index exists.
//! - **in-process** (SQLite, and Postgres without pgvector): an approximate index in this
//!   process, one usearch HNSW graph per agent and scope (`agent`, `agent + room`). A search
//!   for a room asks the agent-wide graph and that room's graph and merges the two by
//!   cosine, so another room's vectors are never even candidates, and no filter can starve
//!   the result. The graphs are a cache of the database, rebuilt at start.
//!
//! The in-process index follows the database like the keyword index does: through
//! `embedding_changes` (a `put` row per batch of vectors stored, each vector carrying the
//! seq of its last write; a `drop` row when an agent's vectors of the model are removed for
//! re-embedding) and through `knowledge_changes` (a document stored or deleted: the index
//! drops what it holds of the document and takes what the database has now). Both replays
//! are idempotent and need no order between the two sequences: an entry is only replaced by
//! a later write of the same chunk, and a `drop` only removes entries written before it.
//!
//! Why usearch (unum-cloud/USearch, 2.x): maintained (monthly releases), removal of single
//! entries (documents get deleted; hnsw_rs cannot remove, instant-distance cannot even add
//! after building), cosine over f32 with SIMD, and a small C++ core built by `cc`
//! (its optional `numkong` kernels are left out to keep the build short).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use troupe_connectors::AgentId;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::storage::{Backend, HNSW_MAX_DIMENSIONS, PgVector, Scope, StorageError, Store, StoredVector};

/// Vectors read per page during a rebuild, and changes replayed per round.
const PAGE: usize = 2_000;
/// Changes of `embedding_changes` replayed per round (each up to 100 vectors).
const CHANGE_PAGE: usize = 50;
/// The HNSW graph's links per node (usearch's default is 16).
const CONNECTIVITY: usize = 16;
/// Candidates kept while inserting: higher builds a better graph, more slowly (64 keeps
/// recall@10 above 0.95 in the tests and halves the build time of 128).
const EXPANSION_ADD: usize = 64;
/// Candidates kept while searching, at least (a search for more keeps that many).
const EXPANSION_SEARCH: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("vector index: {0}")]
    Index(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("vector index task failed: {0}")]
    Task(String),
}

impl From<cxx::Exception> for VectorError {
    fn from(e: cxx::Exception) -> Self {
        VectorError::Index(e.what().to_string())
    }
}

/// Which path answers dense queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VectorMode {
    /// Not decided yet (no sync has run).
    Pending,
    /// pgvector's HNSW in Postgres.
    Pgvector,
    /// The approximate index in this process.
    InProcess,
}

/// How far the vector index has followed the database (for `/readyz` and `/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorStatus {
    pub mode: VectorMode,
    /// The last `embedding_changes` seq applied (or filled into pgvector's column).
    pub applied: i64,
    /// The last one seen in the database.
    pub head: i64,
    pub lag: i64,
    pub rebuilding: bool,
    /// Vectors held in this process (0 on the pgvector path).
    pub vectors: usize,
}

/// One vector held: where it comes from and which graph it is in.
struct Entry {
    chunk_id: String,
    document_id: String,
    agent: AgentId,
    place: String,
    change_seq: i64,
}

#[derive(Default)]
struct State {
    /// The size of every vector held; the first vector sets it.
    dims: Option<usize>,
    /// By key: the chunk's seq.
    entries: HashMap<u64, Entry>,
    by_document: HashMap<String, HashSet<u64>>,
    /// One graph per `agent\0scope`.
    places: HashMap<String, Index>,
    /// Vectors of another size than `dims`, not indexed (counted, logged once).
    skipped: u64,
}

pub struct VectorIndex {
    model: String,
    allow_pgvector: bool,
    mode: OnceLock<VectorMode>,
    state: RwLock<State>,
    /// The last `embedding_changes` seq applied; -1: rebuild first.
    applied: AtomicI64,
    /// The last `knowledge_changes` seq applied.
    documents_applied: AtomicI64,
    head: AtomicI64,
    rebuilding: AtomicBool,
    /// pgvector path: the sizes whose HNSW index this process has made sure of.
    pg_indexed: std::sync::Mutex<HashSet<usize>>,
    /// One sync at a time.
    sync: tokio::sync::Mutex<()>,
}

fn place(agent: &AgentId, scope: &Scope) -> String {
    format!("{agent}\u{0}{scope}")
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn new_graph(dims: usize) -> Result<Index, VectorError> {
    let options = IndexOptions {
        dimensions: dims,
        metric: MetricKind::Cos,
        quantization: ScalarKind::F32,
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    };
    let index = Index::new(&options)?;
    index.reserve(64)?;
    Ok(index)
}

impl State {
    fn remove(&mut self, key: u64) -> Result<(), VectorError> {
        if let Some(entry) = self.entries.remove(&key) {
            if let Some(graph) = self.places.get(&entry.place) {
                graph.remove(key)?;
            }
            if let Some(keys) = self.by_document.get_mut(&entry.document_id) {
                keys.remove(&key);
                if keys.is_empty() {
                    self.by_document.remove(&entry.document_id);
                }
            }
        }
        Ok(())
    }

    /// Takes a stored vector as the database has it now, unless what is held is as new.
    fn upsert(&mut self, v: &StoredVector) -> Result<(), VectorError> {
        let key = v.key as u64;
        if self
            .entries
            .get(&key)
            .is_some_and(|e| e.change_seq >= v.change_seq)
        {
            return Ok(());
        }
        self.remove(key)?;
        let vector = floats(&v.vector);
        if vector.is_empty() {
            return Ok(());
        }
        let dims = *self.dims.get_or_insert(vector.len());
        if vector.len() != dims {
            if self.skipped == 0 {
                tracing::warn!(expected = dims, got = vector.len(),
                    "vector index: a stored vector has another size than the others; it is left out");
            }
            self.skipped += 1;
            return Ok(());
        }
        let place = place(&v.agent_id, &v.scope);
        let graph = match self.places.entry(place.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(new_graph(dims)?),
        };
        if graph.size() >= graph.capacity() {
            graph.reserve((graph.capacity() * 2).max(64))?;
        }
        if graph.add(key, &vector).is_err() {
            // Full after all (removed slots not yet reused): grow, then once more.
            graph.reserve((graph.capacity() * 2).max(64))?;
            graph.add(key, &vector)?;
        }
        self.by_document
            .entry(v.document_id.clone())
            .or_default()
            .insert(key);
        self.entries.insert(
            key,
            Entry {
                chunk_id: v.chunk_id.clone(),
                document_id: v.document_id.clone(),
                agent: v.agent_id.clone(),
                place,
                change_seq: v.change_seq,
            },
        );
        Ok(())
    }

    /// A `drop` change: the agent's vectors written before it are gone.
    fn drop_agent(&mut self, agent: &AgentId, seq: i64) -> Result<(), VectorError> {
        let keys: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| &e.agent == agent && e.change_seq < seq)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.remove(key)?;
        }
        Ok(())
    }

    /// A changed document: what is held of it is replaced by what the database has now.
    fn reconcile(&mut self, documents: &[String], now: &[StoredVector]) -> Result<(), VectorError> {
        let current: HashSet<u64> = now.iter().map(|v| v.key as u64).collect();
        for d in documents {
            let held: Vec<u64> = self
                .by_document
                .get(d)
                .map(|keys| keys.iter().copied().collect())
                .unwrap_or_default();
            for key in held.into_iter().filter(|k| !current.contains(k)) {
                self.remove(key)?;
            }
        }
        for v in now {
            self.upsert(v)?;
        }
        Ok(())
    }
}

impl VectorIndex {
    /// An index of `model`'s vectors; `allow_pgvector` false keeps it in process on
    /// Postgres too (`TROUPE_PGVECTOR=false`).
    pub fn new(model: String, allow_pgvector: bool) -> Arc<Self> {
        Arc::new(VectorIndex {
            model,
            allow_pgvector,
            mode: OnceLock::new(),
            state: RwLock::new(State::default()),
            applied: AtomicI64::new(-1),
            documents_applied: AtomicI64::new(0),
            head: AtomicI64::new(0),
            rebuilding: AtomicBool::new(false),
            pg_indexed: std::sync::Mutex::new(HashSet::new()),
            sync: tokio::sync::Mutex::new(()),
        })
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn mode(&self) -> VectorMode {
        self.mode.get().copied().unwrap_or(VectorMode::Pending)
    }

    pub fn status(&self) -> VectorStatus {
        let applied = self.applied.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        VectorStatus {
            mode: self.mode(),
            applied,
            head,
            lag: (head - applied.max(0)).max(0),
            rebuilding: self.rebuilding.load(Ordering::Relaxed),
            vectors: self.read().entries.len(),
        }
    }

    /// Whether the first sync has run (the index may still lag behind).
    pub fn is_built(&self) -> bool {
        self.applied.load(Ordering::Relaxed) >= 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides the path once, and says which.
    async fn decide(&self, store: &Store) -> Result<VectorMode, VectorError> {
        if let Some(mode) = self.mode.get() {
            return Ok(*mode);
        }
        let mode = if store.backend() != Backend::Postgres {
            tracing::info!(model = %self.model, "vector search: in-process HNSW index (usearch)");
            VectorMode::InProcess
        } else if !self.allow_pgvector {
            tracing::info!(model = %self.model,
                "vector search: in-process HNSW index (usearch); pgvector is off (TROUPE_PGVECTOR=false)");
            VectorMode::InProcess
        } else {
            match store.pgvector_enable().await? {
                PgVector::Enabled { version } => {
                    tracing::info!(model = %self.model, %version, "vector search: pgvector HNSW in Postgres");
                    VectorMode::Pgvector
                }
                PgVector::Unavailable(why) => {
                    tracing::info!(model = %self.model, %why,
                        "vector search: in-process HNSW index (usearch); pgvector is not available");
                    VectorMode::InProcess
                }
            }
        };
        Ok(*self.mode.get_or_init(|| mode))
    }

    /// Brings the index up to the database.
    pub async fn sync(self: &Arc<Self>, store: &Store) -> Result<(), VectorError> {
        let _one = self.sync.lock().await;
        match self.decide(store).await? {
            VectorMode::Pgvector => self.sync_pgvector(store).await,
            _ => self.sync_in_process(store).await,
        }
    }

    /// pgvector: fills the `embedding` column of vectors stored since the last round, and
    /// makes sure each size seen has its HNSW index.
    async fn sync_pgvector(&self, store: &Store) -> Result<(), VectorError> {
        let head = store.last_embedding_change(&self.model).await?;
        self.head.store(head, Ordering::Relaxed);
        let mut after = self.applied.load(Ordering::Relaxed);
        if after < 0 {
            // First round in this process: the sizes stored before it may lack an index
            // (a model used before the extension was installed).
            for dim in store.embedding_dims(&self.model).await? {
                self.ensure_pg_index(store, dim).await?;
            }
        }
        loop {
            let (dims, filled, last) = store.pgvector_fill(&self.model, after, PAGE).await?;
            for dim in dims {
                self.ensure_pg_index(store, dim).await?;
            }
            if filled < PAGE || last == after {
                break;
            }
            after = last;
        }
        self.applied.store(head, Ordering::Relaxed);
        Ok(())
    }

    async fn ensure_pg_index(&self, store: &Store, dim: usize) -> Result<(), VectorError> {
        if self
            .pg_indexed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&dim)
        {
            return Ok(());
        }
        if dim > HNSW_MAX_DIMENSIONS {
            tracing::warn!(model = %self.model, dim,
                "pgvector's HNSW indexes at most {HNSW_MAX_DIMENSIONS} dimensions: these vectors are searched without an index; set TROUPE_PGVECTOR=false to use the in-process index");
        } else {
            tracing::info!(model = %self.model, dim, "making sure pgvector's HNSW index exists");
            store.pgvector_ensure_index(&self.model, dim).await?;
        }
        self.pg_indexed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dim);
        Ok(())
    }

    async fn sync_in_process(self: &Arc<Self>, store: &Store) -> Result<(), VectorError> {
        let head = store.last_embedding_change(&self.model).await?;
        self.head.store(head, Ordering::Relaxed);
        if self.applied.load(Ordering::Relaxed) < 0 {
            let documents = store.last_knowledge_change().await?;
            self.rebuild(store).await?;
            self.documents_applied.store(documents, Ordering::Relaxed);
            self.applied.store(head, Ordering::Relaxed);
        }
        // Vectors written since.
        loop {
            let after = self.applied.load(Ordering::Relaxed);
            let changes = store
                .embedding_changes_after(&self.model, after, CHANGE_PAGE)
                .await?;
            let Some(last) = changes.last().map(|c| c.seq) else {
                break;
            };
            let mut puts: Vec<i64> = Vec::new();
            for change in &changes {
                if change.op == "drop" {
                    self.apply_puts(store, std::mem::take(&mut puts)).await?;
                    let (this, agent, seq) = (Arc::clone(self), change.agent_id.clone(), change.seq);
                    blocking(move || this.write().drop_agent(&agent, seq)).await?;
                } else {
                    puts.push(change.seq);
                }
            }
            self.apply_puts(store, puts).await?;
            self.applied.store(last, Ordering::Relaxed);
            self.head.fetch_max(last, Ordering::Relaxed);
        }
        // Documents stored or deleted since.
        loop {
            let after = self.documents_applied.load(Ordering::Relaxed);
            let changes = store.knowledge_changes_after(after, PAGE).await?;
            let Some(&(last, _)) = changes.last() else {
                break;
            };
            let mut documents: Vec<String> = changes.into_iter().map(|(_, d)| d).collect();
            documents.sort();
            documents.dedup();
            let now = store.vectors_of_documents(&self.model, &documents).await?;
            let this = Arc::clone(self);
            blocking(move || this.write().reconcile(&documents, &now)).await?;
            self.documents_applied.store(last, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn apply_puts(self: &Arc<Self>, store: &Store, puts: Vec<i64>) -> Result<(), VectorError> {
        if puts.is_empty() {
            return Ok(());
        }
        let vectors = store.vectors_of_changes(&self.model, &puts).await?;
        let this = Arc::clone(self);
        blocking(move || {
            let mut state = this.write();
            vectors.iter().try_for_each(|v| state.upsert(v))
        })
        .await
    }

    /// Drops everything and takes every vector of the model from the database.
    async fn rebuild(self: &Arc<Self>, store: &Store) -> Result<(), VectorError> {
        tracing::info!(model = %self.model, "building the in-process vector index from the database");
        self.rebuilding.store(true, Ordering::Relaxed);
        let result = async {
            *self.write() = State::default();
            let mut after = 0;
            loop {
                let page = store.vectors_after(&self.model, after, PAGE).await?;
                let Some(last) = page.last().map(|v| v.key) else {
                    break;
                };
                after = last;
                let this = Arc::clone(self);
                blocking(move || {
                    let mut state = this.write();
                    page.iter().try_for_each(|v| state.upsert(v))
                })
                .await?;
            }
            Ok::<_, VectorError>(())
        }
        .await;
        self.rebuilding.store(false, Ordering::Relaxed);
        if result.is_ok() {
            tracing::info!(model = %self.model, vectors = self.read().entries.len(), "vector index built");
        }
        result
    }

    /// The `k` vectors nearest to `query` among `agent`'s in `scope` and the agent-wide
    /// ones: `(chunk id, cosine)`, best first. The index must have synced once.
    pub async fn nearest(
        &self,
        store: &Store,
        agent: &AgentId,
        scope: &Scope,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(String, f32)>, VectorError> {
        if k == 0 || query.is_empty() {
            return Ok(Vec::new());
        }
        if self.mode() == VectorMode::Pgvector {
            return Ok(store
                .pgvector_nearest(&self.model, agent, scope, query, k, EXPANSION_SEARCH)
                .await?);
        }
        self.nearest_in_process(agent, scope, query, k)
    }

    fn nearest_in_process(
        &self,
        agent: &AgentId,
        scope: &Scope,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(String, f32)>, VectorError> {
        let state = self.read();
        if state.dims != Some(query.len()) {
            return Ok(Vec::new());
        }
        let mut places = vec![place(agent, &Scope::AGENT)];
        if scope.room().is_some() {
            places.push(place(agent, scope));
        }
        let mut found: Vec<(String, f32)> = Vec::new();
        for p in &places {
            let Some(graph) = state.places.get(p) else {
                continue;
            };
            let matches = graph.search(query, k)?;
            for (key, distance) in matches.keys.iter().zip(&matches.distances) {
                if let Some(entry) = state.entries.get(key) {
                    found.push((entry.chunk_id.clone(), 1.0 - distance));
                }
            }
        }
        found.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        found.truncate(k);
        Ok(found)
    }
}

/// The exact answer, by scoring every vector given: the `k` most similar to `query` (all
/// are unit length, so the dot product is the cosine), best first. Vectors of another size
/// are skipped. Searches no longer use it; it is the reference the index is measured
/// against (recall in tests, speed in `troupe bench`).
pub fn exact_nearest(query: &[f32], stored: &[(String, Vec<u8>)], k: usize) -> Vec<(String, f32)> {
    let mut scored: Vec<(f32, &str)> = stored
        .iter()
        .filter(|(_, bytes)| bytes.len() == query.len() * 4)
        .map(|(id, bytes)| {
            let score: f32 = bytes
                .chunks_exact(4)
                .zip(query)
                .map(|(b, q)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * q)
                .sum();
            (score, id.as_str())
        })
        .collect();
    let by_score = |a: &(f32, &str), b: &(f32, &str)| b.0.total_cmp(&a.0).then(a.1.cmp(b.1));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, by_score);
        scored.truncate(k);
    }
    scored.sort_by(by_score);
    scored
        .into_iter()
        .map(|(s, id)| (id.to_string(), s))
        .collect()
}

/// Runs graph work (many inserts) off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, VectorError> + Send + 'static,
) -> Result<T, VectorError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| VectorError::Task(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(key: i64, doc: &str, scope: &Scope, seq: i64, v: &[f32]) -> StoredVector {
        StoredVector {
            key,
            chunk_id: format!("{doc}:{key}"),
            document_id: doc.into(),
            agent_id: AgentId::new("ada"),
            scope: scope.clone(),
            change_seq: seq,
            vector: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn nearest_ranks_by_cosine() {
        let v = |x: &[f32]| x.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        let stored = vec![
            ("far".to_string(), v(&[0.0, 1.0])),
            ("near".to_string(), v(&[0.995, 0.0995])),
            ("mid".to_string(), v(&[0.7071, 0.7071])),
            ("wrong-size".to_string(), v(&[1.0, 0.0, 0.0])),
        ];
        let got = exact_nearest(&[1.0, 0.0], &stored, 2);
        let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, vec!["near", "mid"]);
    }

    #[test]
    fn a_state_replaces_only_with_newer_writes_and_drops_only_older_ones() {
        let mut s = State::default();
        let agent = Scope::AGENT;
        s.upsert(&stored(1, "d", &agent, 5, &[1.0, 0.0])).unwrap();
        // An older write of the same chunk does not replace it.
        s.upsert(&stored(1, "d", &agent, 4, &[0.0, 1.0])).unwrap();
        assert_eq!(s.entries[&1].change_seq, 5);
        // A vector of another size is left out, not indexed.
        s.upsert(&stored(2, "d", &agent, 6, &[1.0, 0.0, 0.0])).unwrap();
        assert_eq!((s.entries.len(), s.skipped), (1, 1));
        s.upsert(&stored(3, "e", &agent, 9, &[0.5, 0.5])).unwrap();
        s.drop_agent(&AgentId::new("ada"), 7).unwrap();
        let keys: Vec<u64> = s.entries.keys().copied().collect();
        assert_eq!(keys, vec![3], "the drop at 7 keeps the write at 9");
        s.reconcile(&["e".to_string()], &[]).unwrap();
        assert!(s.entries.is_empty() && s.by_document.is_empty());
    }
}
