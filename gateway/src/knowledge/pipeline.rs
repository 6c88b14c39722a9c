//! Ingesting many files at the encoder's pace (`troupe ingest` of a folder, issue 48). The
//! files flow through three stages that run at once, joined by bounded queues:
//!
//! 1. prepare: each file hashed, read and chunked by the sandboxed workers (as many files at
//!    once as there are workers), in order, at most `PREPARE_AHEAD` documents ahead;
//! 2. store: each prepared document stored all or nothing (searchable by keywords from then
//!    on), and its chunks gathered into pages that cross documents ([`Pages`]);
//! 3. embed: pages of `EMBED_PAGE` chunks embedded, `AT_ENCODER` at the encoder at once (the
//!    next page is tokenised while the current one runs), their vectors stored, and each
//!    file reported once its last chunk has its vector.
//!
//! Why: file by file, each small file was embedded as its own tiny batch, and the encoder
//! waited while the next file was read, chunked and stored. Here the encoder gets full
//! pages, and everything else happens while it works.
//!
//! Memory is bounded, whatever the folder: `PREPARE_AHEAD` prepared documents, less than a
//! page (plus the document that filled it) in the store stage, `AT_ENCODER` pages at the
//! encoder. What one file at a time guaranteed still holds: a document is stored all or
//! nothing; a file that cannot be read is reported with its error and the rest go on; a
//! database failure stops the run; a duplicate is reported as one; files are reported in
//! their order.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::sync::mpsc;
use troupe_connectors::{AgentId, RoomKey};

use super::follow::FollowVectors;
use super::ingest::{EMBED_PAGE, Ingested, Origin, Prepared};
use super::{Input, Knowledge, KnowledgeError, Role};
use crate::storage::Scope;

/// Prepared documents waiting for the store stage, at most.
const PREPARE_AHEAD: usize = 16;
/// Pages at the encoder at once: one running, the next one being tokenised behind it.
const AT_ENCODER: usize = 2;

/// One file's outcome: what was stored, or why the file was skipped.
pub type Outcome = Result<Ingested, KnowledgeError>;

/// A chunk waiting for its vector: `(chunk id, scope, text)`.
type Chunk = (String, Scope, String);

/// Chunks to embed, gathered across documents into pages, and the documents waiting for
/// them: a document is done once the page holding its last chunk is (one without chunks,
/// skipped or a duplicate, with the page after the documents before it), so documents are
/// done in the order they came.
pub(super) struct Pages<T> {
    size: usize,
    chunks: VecDeque<Chunk>,
    /// Each document, with how many chunks had been pushed once its own were.
    docs: VecDeque<(T, usize)>,
    pushed: usize,
    taken: usize,
}

/// A page for the encoder: its chunks (at most a page's size; none when only documents
/// without chunks are done with it), and the documents done once they are embedded.
pub(super) struct Page<T> {
    pub(super) chunks: Vec<Chunk>,
    pub(super) done: Vec<T>,
}

impl<T> Pages<T> {
    pub(super) fn new(size: usize) -> Self {
        Pages {
            size: size.max(1),
            chunks: VecDeque::new(),
            docs: VecDeque::new(),
            pushed: 0,
            taken: 0,
        }
    }

    /// Adds a document and its chunks to embed (none for a skipped file or a duplicate).
    pub(super) fn push(&mut self, doc: T, chunks: impl IntoIterator<Item = Chunk>) {
        let before = self.chunks.len();
        self.chunks.extend(chunks);
        self.pushed += self.chunks.len() - before;
        self.docs.push_back((doc, self.pushed));
    }

    /// Whether another document may come in: less than a page is held. This is the store
    /// stage's bound (a document larger than a page is held whole once, as it was read).
    pub(super) fn has_room(&self) -> bool {
        self.chunks.len() < self.size && self.docs.len() < self.size
    }

    pub(super) fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The next page to hand to the encoder, which has `at_encoder` pages already: a full
    /// one while it has room; whatever is held when it is idle (it never waits for a page
    /// to fill) or when no more input comes; else none.
    pub(super) fn next(&mut self, at_encoder: usize, input_over: bool) -> Option<Page<T>> {
        let full = self.chunks.len() >= self.size;
        let send =
            at_encoder < AT_ENCODER && !self.is_empty() && (full || at_encoder == 0 || input_over);
        if !send {
            return None;
        }
        let n = self.chunks.len().min(self.size);
        let chunks: Vec<Chunk> = self.chunks.drain(..n).collect();
        self.taken += n;
        let mut done = Vec::new();
        while self.docs.front().is_some_and(|(_, end)| *end <= self.taken) {
            done.extend(self.docs.pop_front().map(|(doc, _)| doc));
        }
        Some(Page { chunks, done })
    }
}

impl Knowledge {
    /// Ingests `files` for `agent_id` (and `room`) through the stages above, calling
    /// `report` once per file, in their order, when it is stored and embedded or skipped.
    /// Only a database failure is an error: it stops the run (the files reported before it
    /// are stored).
    pub async fn ingest_files(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        files: &[PathBuf],
        mut report: impl FnMut(&Path, Outcome),
    ) -> Result<(), KnowledgeError> {
        let (prepared_tx, prepared_rx) = mpsc::channel(PREPARE_AHEAD);
        let (pages_tx, pages_rx) = mpsc::channel(AT_ENCODER);
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let prepare = self.prepare_stage(agent_id, room, files, prepared_tx);
        let store = self.store_stage(origin, agent_id, prepared_rx, pages_tx, done_rx);
        let embed = self.embed_stage(agent_id, pages_rx, done_tx, |(i, outcome)| {
            report(&files[i], outcome)
        });
        tokio::try_join!(prepare, store, embed)?;
        Ok(())
    }

    /// Stage 1: each file prepared, in order, as many at once as there are workers.
    async fn prepare_stage(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        files: &[PathBuf],
        out: mpsc::Sender<(usize, Result<Prepared, KnowledgeError>)>,
    ) -> Result<(), KnowledgeError> {
        let workers = self.inner.settings.extract.workers.max(1);
        // Each file is read in a task of its own, not in a future polled here: while this
        // stage waits for room in `out`, a read must still go on, since it may hold the
        // database's one SQLite connection (its duplicate check), which the other stages
        // wait for.
        let mut reading = FuturesOrdered::new();
        let mut next = 0;
        loop {
            while reading.len() < workers && next < files.len() {
                let (knowledge, agent, room) = (self.clone(), agent_id.clone(), room.cloned());
                let path = files[next].clone();
                let i = next;
                reading.push_back(tokio::spawn(async move {
                    let name = path.display().to_string();
                    let p = knowledge
                        .prepare(&agent, room.as_ref(), &name, None, Input::File(&path))
                        .await;
                    (i, p)
                }));
                next += 1;
            }
            let Some(done) = reading.next().await else {
                return Ok(());
            };
            let item = done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            if out.send(item).await.is_err() {
                return Ok(()); // the store stage stopped: its error is the run's
            }
        }
    }

    /// Stage 2: each prepared document stored, its chunks gathered into pages, and pages
    /// handed to the encoder as [`Pages::next`] says; `done` counts the pages it finished.
    async fn store_stage(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        mut prepared: mpsc::Receiver<(usize, Result<Prepared, KnowledgeError>)>,
        pages_tx: mpsc::Sender<Page<(usize, Outcome)>>,
        mut done: mpsc::UnboundedReceiver<()>,
    ) -> Result<(), KnowledgeError> {
        let mut pages = Pages::new(EMBED_PAGE);
        let (mut at_encoder, mut input_over) = (0usize, false);
        loop {
            while let Some(page) = pages.next(at_encoder, input_over) {
                at_encoder += 1;
                if pages_tx.send(page).await.is_err() {
                    return Ok(()); // the embed stage stopped: its error is the run's
                }
            }
            if input_over && pages.is_empty() {
                return Ok(()); // dropping `pages_tx` ends the embed stage
            }
            tokio::select! {
                next = prepared.recv(), if !input_over && pages.has_room() => match next {
                    None => input_over = true,
                    Some((_, Err(e @ KnowledgeError::Storage(_)))) => return Err(e),
                    Some((i, Err(e))) => pages.push((i, Err(e)), []),
                    Some((i, Ok(p))) => {
                        let (ingested, job) = self.store_one(origin, agent_id, p, FollowVectors::ByCaller).await?;
                        let chunks = job.into_iter().flat_map(|j| {
                            let scope = j.scope;
                            j.chunks.into_iter().map(move |(id, text)| (id, scope.clone(), text))
                        });
                        pages.push((i, Ok(ingested)), chunks);
                    }
                },
                finished = done.recv() => match finished {
                    Some(()) => at_encoder = at_encoder.saturating_sub(1),
                    None => return Ok(()),
                },
            }
        }
    }

    /// Stage 3: pages embedded, `AT_ENCODER` at once, and their vectors stored in order;
    /// each page's documents reported after. This process's embedding turn is held for
    /// the run (`embedjob`).
    async fn embed_stage(
        &self,
        agent_id: &AgentId,
        mut pages: mpsc::Receiver<Page<(usize, Outcome)>>,
        done: mpsc::UnboundedSender<()>,
        mut report: impl FnMut((usize, Outcome)),
    ) -> Result<(), KnowledgeError> {
        // Never closed: the semaphore lives as long as the store.
        let _turn = match self.embedder() {
            Some(_) => self.inner.embedding.acquire().await.ok(),
            None => None,
        };
        let mut at_encoder = FuturesOrdered::new();
        let mut input_over = false;
        loop {
            tokio::select! {
                page = pages.recv(), if !input_over => match page {
                    Some(page) => {
                        // A task of its own, for the reason the reads have theirs: this
                        // stage stores a page's vectors while the next one is embedded.
                        let (knowledge, agent) = (self.clone(), agent_id.clone());
                        at_encoder.push_back(tokio::spawn(async move {
                            knowledge.page_vectors(&agent, page).await
                        }));
                    }
                    None => input_over = true,
                },
                Some(embedded) = at_encoder.next(), if !at_encoder.is_empty() => {
                    let (page, vectors) =
                        embedded.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    if let Some(embedder) = self.embedder().filter(|_| !vectors.is_empty()) {
                        let ids = page.chunks.iter().map(|(id, scope, _)| (id.as_str(), scope));
                        self.put_vectors(&embedder.model_key(), agent_id, ids, vectors).await?;
                        self.follow_vectors().await;
                    }
                    page.done.into_iter().for_each(&mut report);
                    let _ = done.send(());
                },
                else => return Ok(()),
            }
        }
    }

    /// A page's vectors (none without an embedder or chunks). An embedding failure leaves
    /// its documents searchable by keywords: it is logged, and the next start (or `troupe
    /// ingest --reembed`) embeds what is missing, as for one document.
    async fn page_vectors<T>(&self, agent_id: &AgentId, page: Page<T>) -> (Page<T>, Vec<Vec<f32>>) {
        let Some(embedder) = self.embedder().filter(|_| !page.chunks.is_empty()) else {
            return (page, Vec::new());
        };
        let texts: Vec<&str> = page.chunks.iter().map(|(_, _, t)| t.as_str()).collect();
        match self
            .embed_for(embedder, agent_id, &texts, Role::Passage)
            .await
        {
            Ok(vectors) => (page, vectors),
            Err(e) => {
                let first = page.chunks.first().map_or("", |(id, _, _)| id.as_str());
                tracing::warn!(error = %e, chunks = page.chunks.len(), first_chunk = %first,
                    "could not embed a page of chunks; they are searchable by keywords only until the next start or `troupe ingest --reembed`");
                (page, Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(doc: &str, n: usize) -> Vec<Chunk> {
        (0..n)
            .map(|i| (format!("{doc}:{i}"), Scope::AGENT, format!("text {i}")))
            .collect()
    }

    #[test]
    fn pages_cross_documents_and_fill_up_while_the_encoder_works() {
        let mut pages = Pages::new(4);
        for doc in ["a", "b", "c"] {
            pages.push(doc, chunks(doc, 1));
        }
        // The encoder is busy: no partial page goes, and there is room for more.
        assert!(pages.next(1, false).is_none());
        assert!(pages.has_room());
        pages.push("d", chunks("d", 1));
        assert!(!pages.has_room(), "a full page is held: no more input");
        let page = pages.next(1, false).expect("a full page");
        let ids: Vec<&str> = page.chunks.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(ids, ["a:0", "b:0", "c:0", "d:0"]);
        assert_eq!(page.done, ["a", "b", "c", "d"]);
        // Two pages at the encoder: nothing more, even full.
        pages.push("e", chunks("e", 5));
        assert!(pages.next(AT_ENCODER, false).is_none());
    }

    #[test]
    fn an_idle_encoder_takes_what_there_is_and_a_document_is_done_with_its_last_chunk() {
        let mut pages = Pages::new(4);
        pages.push("big", chunks("big", 6));
        pages.push("skipped", []);
        pages.push("small", chunks("small", 1));
        let first = pages.next(0, false).expect("a full page");
        assert_eq!(first.chunks.len(), 4);
        assert!(first.done.is_empty(), "`big` has chunks left");
        // Idle: the rest goes, though under a page; `skipped` keeps its place in order.
        let second = pages.next(0, false).expect("what is held");
        assert_eq!(second.chunks.len(), 3);
        assert_eq!(second.done, ["big", "skipped", "small"]);
        assert!(pages.is_empty() && pages.next(0, true).is_none());
        // A file without chunks alone still goes through, in order, once input is over.
        pages.push("dup", []);
        assert!(pages.next(1, false).is_none());
        let last = pages.next(1, true).expect("the end");
        assert!(last.chunks.is_empty());
        assert_eq!(last.done, ["dup"]);
    }

    #[test]
    fn the_store_stage_holds_at_most_a_page_of_documents() {
        // Keyword only: documents without chunks also fill the bound.
        let mut pages: Pages<usize> = Pages::new(3);
        let mut pushed = 0;
        while pages.has_room() {
            pages.push(pushed, []);
            pushed += 1;
        }
        assert_eq!(pushed, 3);
    }
}
