//! The vector index: the dense candidates of a search without scoring every stored vector.
//!
//! Two paths, chosen once per process at the first sync and logged:
//! - **pgvector** (Postgres with the `vector` extension available, unless `TROUPE_PGVECTOR`
//!   is off): the database answers through one HNSW index per model and size
//!   (storage/pgvector.rs). This index only fills the typed `embedding` column from the
//!   stored bytes, following `embedding_changes`, and makes sure the HNSW index exists.
//! - **in-process** (SQLite, and Postgres without pgvector): an inverted-file index in this
//!   process, one per agent and scope (`agent`, `agent + room`): spherical k-means cells
//!   (about √n/2 of them, trained again each time a scope doubles), and a query scans only
//!   the cells nearest to it. A search for a room asks the agent-wide index and that room's
//!   and merges the two by cosine, so another room's vectors are never even candidates, and
//!   no filter can starve the result. Below 1,024 vectors a scope is scanned whole (that is
//!   the scope, not the persona). The indexes are a cache of the database, rebuilt at start.
//!
//! The in-process index follows the database like the keyword index does: through
//! `embedding_changes` (a `put` row per batch of vectors stored, each vector carrying the
//! seq of its last write; a `drop` row when an agent's vectors of the model are removed for
//! re-embedding) and through `knowledge_changes` (a document stored or deleted: the index
//! drops what it holds of the document and takes what the database has now). Both replays
//! are idempotent and need no order between the two sequences: an entry is only replaced by
//! a later write of the same chunk, and a `drop` only removes entries written before it.
//!
//! Why a structure of our own and not a crate: usearch (the best fit: HNSW with removal)
//! pulls in a C++ build through cxx, which here changed the features of `cc` and so rebuilt
//! every crate with a C build script; hnsw_rs cannot remove an entry (deleted documents
//! would stay until a rebuild); instant-distance cannot add after building. An inverted
//! file is a few dozen lines, removes in O(cell), and its recall is tested against the
//! exact scan (`storage/vector_tests.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use troupe_connectors::sync::{Locked, RwLocked};

use troupe_connectors::AgentId;

use crate::storage::{
    Backend, HNSW_MAX_DIMENSIONS, PgVector, Scope, StorageError, Store, StoredVector,
};

/// Vectors read per page during a rebuild, and changes replayed per round.
const PAGE: usize = 2_000;
/// Changes of `embedding_changes` replayed per round (each up to 100 vectors).
const CHANGE_PAGE: usize = 50;
/// A scope with fewer vectors is scanned whole; at this size its cells are first trained.
const TRAIN_MIN: usize = 1_024;
/// Rounds of k-means per training.
const KMEANS_ROUNDS: usize = 6;
/// Vectors per cell in the k-means sample.
const SAMPLE_PER_CELL: usize = 32;
/// Cells scanned per query, at least; else a sixth of them (recall@10 ≥ 0.95 in the tests).
const PROBE_MIN: usize = 8;
/// pgvector's candidate list (`hnsw.ef_search`), at least.
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

/// One vector held: where it comes from and which scope index it is in.
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
    /// One index per `agent\0scope`.
    places: HashMap<String, Cells>,
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// "No cell": the scope is not trained yet.
const NO_CELL: u32 = u32::MAX;

/// One scope's vectors: stored flat by slot, and, once trained, grouped in cells around
/// k-means centroids (unit vectors, so the dot product is the cosine).
struct Cells {
    dims: usize,
    data: Vec<f32>,
    keys: Vec<u64>,
    slot_of: HashMap<u64, usize>,
    cell_of: Vec<u32>,
    centroids: Vec<f32>,
    cells: Vec<Vec<u32>>,
    trained_at: usize,
}

impl Cells {
    fn new(dims: usize) -> Self {
        Cells {
            dims,
            data: Vec::new(),
            keys: Vec::new(),
            slot_of: HashMap::new(),
            cell_of: Vec::new(),
            centroids: Vec::new(),
            cells: Vec::new(),
            trained_at: 0,
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn vector(&self, slot: usize) -> &[f32] {
        &self.data[slot * self.dims..(slot + 1) * self.dims]
    }

    fn nearest_cell(centroids: &[f32], dims: usize, v: &[f32]) -> u32 {
        let mut best = (f32::NEG_INFINITY, 0u32);
        for (i, c) in centroids.chunks_exact(dims).enumerate() {
            let s = dot(c, v);
            if s > best.0 {
                best = (s, i as u32);
            }
        }
        best.1
    }

    fn add(&mut self, key: u64, v: &[f32]) {
        let slot = self.len();
        self.data.extend_from_slice(v);
        self.keys.push(key);
        self.slot_of.insert(key, slot);
        if self.centroids.is_empty() {
            self.cell_of.push(NO_CELL);
        } else {
            let cell = Self::nearest_cell(&self.centroids, self.dims, v);
            self.cell_of.push(cell);
            self.cells[cell as usize].push(slot as u32);
        }
        if self.len() >= TRAIN_MIN && self.len() >= 2 * self.trained_at {
            self.train();
        }
    }

    fn take_out_of_cell(&mut self, slot: usize) {
        let cell = self.cell_of[slot];
        if cell != NO_CELL {
            let members = &mut self.cells[cell as usize];
            if let Some(p) = members.iter().position(|&s| s as usize == slot) {
                members.swap_remove(p);
            }
        }
    }

    /// Removes `key`; the last slot moves into its place.
    fn remove(&mut self, key: u64) {
        let Some(slot) = self.slot_of.remove(&key) else {
            return;
        };
        self.take_out_of_cell(slot);
        let last = self.len() - 1;
        if slot != last {
            let d = self.dims;
            self.data.copy_within(last * d..(last + 1) * d, slot * d);
            let moved = self.keys[last];
            self.keys[slot] = moved;
            self.slot_of.insert(moved, slot);
            let cell = self.cell_of[last];
            self.cell_of[slot] = cell;
            if cell != NO_CELL {
                let members = &mut self.cells[cell as usize];
                if let Some(p) = members.iter().position(|&s| s as usize == last) {
                    members[p] = slot as u32;
                }
            }
        }
        self.keys.pop();
        self.cell_of.pop();
        self.data.truncate(last * self.dims);
    }

    /// Spherical k-means over a sample, then every vector into its nearest cell.
    fn train(&mut self) {
        let (n, d) = (self.len(), self.dims);
        let count = (((n as f64).sqrt() / 2.0).ceil() as usize).max(1);
        let step = (n / (SAMPLE_PER_CELL * count)).max(1);
        let sample: Vec<usize> = (0..n).step_by(step).collect();
        let mut centroids: Vec<f32> = (0..count)
            .flat_map(|i| self.vector(sample[i * sample.len() / count]).to_vec())
            .collect();
        for _ in 0..KMEANS_ROUNDS {
            let mut sums = vec![0f32; count * d];
            let mut sizes = vec![0usize; count];
            for &slot in &sample {
                let v = self.vector(slot);
                let cell = Self::nearest_cell(&centroids, d, v) as usize;
                sizes[cell] += 1;
                sums[cell * d..(cell + 1) * d]
                    .iter_mut()
                    .zip(v)
                    .for_each(|(s, x)| *s += x);
            }
            for cell in (0..count).filter(|&c| sizes[c] > 0) {
                let sum = &sums[cell * d..(cell + 1) * d];
                let norm = dot(sum, sum).sqrt().max(1e-12);
                centroids[cell * d..(cell + 1) * d]
                    .iter_mut()
                    .zip(sum)
                    .for_each(|(c, s)| *c = s / norm);
            }
        }
        let mut cells = vec![Vec::new(); count];
        for slot in 0..n {
            let cell = Self::nearest_cell(&centroids, d, self.vector(slot));
            self.cell_of[slot] = cell;
            cells[cell as usize].push(slot as u32);
        }
        self.centroids = centroids;
        self.cells = cells;
        self.trained_at = n;
    }

    /// The `k` best `(key, cosine)`: over the nearest cells once trained, else all.
    fn search(&self, q: &[f32], k: usize) -> Vec<(u64, f32)> {
        let mut scored: Vec<(f32, u64)> = Vec::new();
        let mut score = |slot: usize| scored.push((dot(self.vector(slot), q), self.keys[slot]));
        if self.centroids.is_empty() {
            (0..self.len()).for_each(&mut score);
        } else {
            let mut near: Vec<(f32, usize)> = self
                .centroids
                .chunks_exact(self.dims)
                .enumerate()
                .map(|(i, c)| (dot(c, q), i))
                .collect();
            let probe = PROBE_MIN.max(near.len() / 6).min(near.len());
            near.select_nth_unstable_by(probe - 1, |a, b| b.0.total_cmp(&a.0));
            for &(_, cell) in &near[..probe] {
                self.cells[cell].iter().for_each(|&s| score(s as usize));
            }
        }
        let by_score = |a: &(f32, u64), b: &(f32, u64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if scored.len() > k {
            scored.select_nth_unstable_by(k - 1, by_score);
            scored.truncate(k);
        }
        scored.sort_by(by_score);
        scored.into_iter().map(|(s, key)| (key, s)).collect()
    }
}

impl State {
    fn remove(&mut self, key: u64) -> Result<(), VectorError> {
        if let Some(entry) = self.entries.remove(&key) {
            if let Some(cells) = self.places.get_mut(&entry.place) {
                cells.remove(key);
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
                tracing::warn!(
                    expected = dims,
                    got = vector.len(),
                    "vector index: a stored vector has another size than the others; it is left out"
                );
            }
            self.skipped += 1;
            return Ok(());
        }
        let place = place(&v.agent_id, &v.scope);
        self.places
            .entry(place.clone())
            .or_insert_with(|| Cells::new(dims))
            .add(key, &vector);
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
        self.state.read_locked()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write_locked()
    }

    /// Decides the path once, and says which.
    async fn decide(&self, store: &Store) -> Result<VectorMode, VectorError> {
        if let Some(mode) = self.mode.get() {
            return Ok(*mode);
        }
        let mode = if store.backend() != Backend::Postgres {
            tracing::info!(model = %self.model, "vector search: in-process index (inverted file per scope)");
            VectorMode::InProcess
        } else if !self.allow_pgvector {
            tracing::info!(model = %self.model,
                "vector search: in-process index (inverted file per scope); pgvector is off (TROUPE_PGVECTOR=false)");
            VectorMode::InProcess
        } else {
            match store.pgvector_enable().await? {
                PgVector::Enabled { version } => {
                    tracing::info!(model = %self.model, %version, "vector search: pgvector HNSW in Postgres");
                    VectorMode::Pgvector
                }
                PgVector::Unavailable(why) => {
                    tracing::info!(model = %self.model, %why,
                        "vector search: in-process index (inverted file per scope); pgvector is not available");
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
        if self.pg_indexed.locked().contains(&dim) {
            return Ok(());
        }
        if dim > HNSW_MAX_DIMENSIONS {
            tracing::warn!(model = %self.model, dim,
                "pgvector's HNSW indexes at most {HNSW_MAX_DIMENSIONS} dimensions: these vectors are searched without an index; set TROUPE_PGVECTOR=false to use the in-process index");
        } else {
            tracing::info!(model = %self.model, dim, "making sure pgvector's HNSW index exists");
            store.pgvector_ensure_index(&self.model, dim).await?;
        }
        self.pg_indexed.locked().insert(dim);
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
                    let (this, agent, seq) =
                        (Arc::clone(self), change.agent_id.clone(), change.seq);
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

    async fn apply_puts(
        self: &Arc<Self>,
        store: &Store,
        puts: Vec<i64>,
    ) -> Result<(), VectorError> {
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
            let Some(cells) = state.places.get(p) else {
                continue;
            };
            for (key, score) in cells.search(query, k) {
                if let Some(entry) = state.entries.get(&key) {
                    found.push((entry.chunk_id.clone(), score));
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

/// Runs index work (many inserts, training) off the async runtime.
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
            ("mid".to_string(), v(&[std::f32::consts::FRAC_1_SQRT_2; 2])),
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
        s.upsert(&stored(2, "d", &agent, 6, &[1.0, 0.0, 0.0]))
            .unwrap();
        assert_eq!((s.entries.len(), s.skipped), (1, 1));
        s.upsert(&stored(3, "e", &agent, 9, &[0.5, 0.5])).unwrap();
        s.drop_agent(&AgentId::new("ada"), 7).unwrap();
        let keys: Vec<u64> = s.entries.keys().copied().collect();
        assert_eq!(keys, vec![3], "the drop at 7 keeps the write at 9");
        s.reconcile(&["e".to_string()], &[]).unwrap();
        assert!(s.entries.is_empty() && s.by_document.is_empty());
    }
}
