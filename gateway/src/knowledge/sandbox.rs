//! The sandboxed document worker: extraction and chunking in a child process that may
//! crash, run out of memory or hang without taking the gateway with it.
//!
//! Parsers of PDF, HTML and CSV are not written for hostile input: a page whose `/Parent`
//! points at itself overflows the stack (which `catch_unwind` cannot catch), a few KB of
//! nested FlateDecode streams inflate to gigabytes, and text-shaped inputs can be
//! quadratic. So the gateway never parses a document itself. It starts its own executable
//! as `troupe extract` with resource limits set between `fork` and `exec` (address space,
//! CPU seconds, no file writes, no core dump, few descriptors), feeds it a document on
//! stdin and reads the chunks from stdout, within a wall-clock deadline per document and
//! an output cap. A worker that dies, is killed or overruns becomes
//! [`KnowledgeError::Unreadable`] (422) with a sentence saying so; the gateway goes on.
//! Dropping the future (a client that disconnects, a shutdown) kills the worker.
//!
//! A worker is kept for the next document (at most [`MAX_DOCUMENTS`] or [`MAX_INPUT`] bytes
//! in all, and only after inputs of at most [`REUSE_MAX_INPUT`] bytes), because starting one
//! costs more than reading most documents: it builds the cl100k tokenizer, 0.1–0.2 s of CPU. Each document
//! still has its own deadline; a worker that failed is never reused, and a document that a
//! reused worker failed on is tried once more in a new one, so that what an earlier
//! document left behind (memory, CPU seconds spent) cannot refuse it. A document that
//! reached its deadline is not tried again: the deadline is wall-clock time of its own,
//! which nothing an earlier document did can shorten, so a second try would only hold a
//! worker slot for a second deadline (issue 30, finding 6). A worker is ended after
//! [`IDLE_FOR`] without work.
//!
//! The protocol, both ways over pipes, repeated for each document:
//! - request: one JSON line ([`Request`], which gives the document's length), then the
//!   document's bytes; the worker exits when its input ends instead of a request;
//! - reply: one JSON line ([`Reply`]); when it is `ok`, that many frames follow, each a
//!   little-endian `u32` length and that many bytes of UTF-8: the chunks, in order.
//!
//! It owns the worker's limits, its protocol and [`worker_main`], the worker itself. It
//! knows nothing of storage or agents.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_connectors::sync::Locked;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;

use super::KnowledgeError;
use super::chunk;
use super::extract::{self, ExtractError, Format};
use crate::config::ExtractSettings;

/// The longest request or reply line; a file name and a sentence fit many times over.
const MAX_LINE: u64 = 64 * 1024;
/// What the worker may write on stderr that the gateway keeps for its log.
const MAX_STDERR: u64 = 4 * 1024;
/// Descriptors the worker may hold: stdio, and what the loader opens while starting.
const WORKER_FILES: u64 = 32;
/// Documents one worker reads before it is ended. A worker is kept between documents
/// because starting one costs more than reading a typical document: building the cl100k
/// tokenizer from its bundled vocabulary takes 0.1–0.2 s of CPU. At 64, a folder of small
/// files paid a start every 64 files, 2–3 ms of CPU a file, as much as its chunking and storing
/// together (issue 48: ingest at the encoder's pace); what bounds a worker's exposure to other
/// documents is [`MAX_INPUT`], its CPU (half the deadline) and the input that ends it.
const MAX_DOCUMENTS: usize = 1024;
/// The input one worker reads in all before it is ended: sixteen inputs of the largest size
/// a worker is kept after ([`REUSE_MAX_INPUT`]), so that a worker's heap, however it
/// fragments, is given back to the system after a bounded amount of parsing.
const MAX_INPUT: u64 = 64 << 20;
/// A worker that read a larger input than this is ended rather than kept, so that what it
/// allocated goes back to the system.
const REUSE_MAX_INPUT: usize = 4 << 20;
/// How long a worker waits for another document before it is ended.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// How long a worker that broke off its reply gets to exit by itself.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// The extracted text may be this many times the input, plus [`TEXT_SLACK`], before the
/// worker refuses the document: JSON's `path: value` lines and CSV's `column: value` pairs
/// legitimately grow a file, a decompression bomb grows it without end.
const TEXT_FACTOR: usize = 8;
const TEXT_SLACK: usize = 1 << 20;

/// The most text the worker keeps from an input of `input` bytes.
fn max_text(input: usize) -> usize {
    input.saturating_mul(TEXT_FACTOR).saturating_add(TEXT_SLACK)
}

/// The most reply bytes the gateway reads for an input of `input` bytes: the chunks repeat
/// their overlap, so twice the text bound, plus the framing.
fn max_reply(input: usize) -> usize {
    max_text(input).saturating_mul(2).saturating_add(64 * 1024)
}

/// Where a document's bytes are: in memory (a character's text entry, a chat attachment)
/// or in a file (an upload spooled to disk, a file named by the CLI or a character).
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

/// A document read and chunked, not yet stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunked {
    pub format: Format,
    pub chunks: Vec<String>,
    /// Each chunk's terms for the keyword index, when read in this process (`chunk`);
    /// empty from a worker, whose chunks the index analyzes as it takes them.
    pub terms: Vec<String>,
}

/// The request line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    name: String,
    content_type: Option<String>,
    chunk_tokens: usize,
    chunk_overlap: usize,
    /// The document's length: that many bytes follow the line.
    bytes: u64,
}

/// The reply line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
enum Reply {
    #[serde(rename_all = "camelCase")]
    Ok {
        content_type: String,
        chunks: usize,
    },
    Unsupported {
        detail: String,
    },
    Unreadable {
        detail: String,
    },
}

/// Extraction and chunking of one document, as both the worker and the in-process reader
/// do it; with each chunk's terms when asked.
fn read_document(
    request: &Request,
    bytes: &[u8],
    with_terms: bool,
) -> Result<Chunked, ExtractError> {
    let name = request.name.as_str();
    let format = extract::detect(name, request.content_type.as_deref(), bytes)?;
    let text = extract::extract(format, name, bytes)?;
    let limit = max_text(bytes.len());
    if text.len() > limit {
        return Err(ExtractError::Unreadable(format!(
            "`{name}` expands to more than {limit} bytes of text from {} bytes; it looks \
             like a decompression bomb",
            bytes.len()
        )));
    }
    let (tokens, overlap) = (request.chunk_tokens, request.chunk_overlap);
    if !with_terms {
        let chunks = chunk::chunk(format, &text, tokens, overlap);
        return Ok(Chunked {
            format,
            chunks,
            terms: Vec::new(),
        });
    }
    let (chunks, terms) = chunk::chunk_with_terms(format, &text, tokens, overlap)
        .into_iter()
        .unzip();
    Ok(Chunked {
        format,
        chunks,
        terms,
    })
}

/// The worker's jemalloc options (the executable's allocator, `main.rs`). jemalloc keeps
/// the address space it frees mapped (`retain`), and under the worker's `RLIMIT_AS` that
/// space ran out: a 52 MB Markdown file, which glibc's malloc read within 512 MB, crashed
/// the worker (tests/knowledge.rs). Unmapped when freed, it reads again. No effect on a
/// build with another allocator.
const WORKER_MALLOC_CONF: &str = "retain:false";

/// Who reads documents: a sandboxed worker per document (the gateway, the CLI), or this
/// process (unit tests and benchmarks, whose executable is not `troupe`).
#[derive(Clone)]
pub(crate) enum Reader {
    InProcess,
    Worker(Arc<Worker>),
}

/// Starts and bounds workers.
pub(crate) struct Worker {
    /// The program and its leading arguments: `troupe extract`.
    program: PathBuf,
    args: Vec<String>,
    settings: ExtractSettings,
    permits: Semaphore,
    /// Workers waiting for their next document.
    idle: std::sync::Mutex<Vec<Running>>,
    /// Workers started so far (also `troupe_extract_workers_started_total`), so that a
    /// test can tell a retry from a single try without timing it.
    started: std::sync::atomic::AtomicU64,
}

/// A started worker, between documents or reading one.
struct Running {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
    /// The end of what it wrote on stderr (at most [`MAX_STDERR`] bytes), for the log.
    stderr: Arc<std::sync::Mutex<Vec<u8>>>,
    /// What it has served so far.
    served: Served,
    idle_since: Instant,
}

/// What one worker has served: what decides whether it is kept for another document.
#[derive(Debug, Default)]
struct Served {
    /// Documents it has answered.
    documents: usize,
    /// Their bytes, in all.
    input: u64,
    /// Wall-clock time spent on them: an upper bound of its CPU time, since it has one
    /// thread.
    busy: Duration,
}

impl Served {
    /// Whether it has read its share and is ended rather than kept (`put_idle`).
    fn spent(&self, timeout: Duration) -> bool {
        self.documents >= MAX_DOCUMENTS || self.input >= MAX_INPUT || self.busy >= timeout / 2
    }
}

impl Worker {
    /// Workers that run this executable as `troupe extract`.
    pub(crate) fn current_exe(settings: ExtractSettings) -> Worker {
        // current_exe reads /proc/self/exe on Linux; that link also works as the program.
        let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        Self::new(program, vec!["extract".into()], settings)
    }

    pub(crate) fn new(program: PathBuf, args: Vec<String>, settings: ExtractSettings) -> Worker {
        Worker {
            permits: Semaphore::new(settings.workers.max(1)),
            program,
            args,
            settings,
            idle: std::sync::Mutex::new(Vec::new()),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Reader {
    /// Reads and chunks one document.
    pub(crate) async fn read(
        &self,
        name: &str,
        content_type: Option<&str>,
        input: Input<'_>,
        (chunk_tokens, chunk_overlap): (usize, usize),
    ) -> Result<Chunked, KnowledgeError> {
        let request = Request {
            name: name.to_string(),
            content_type: content_type.map(str::to_string),
            chunk_tokens,
            chunk_overlap,
            bytes: 0,
        };
        match self {
            Reader::InProcess => {
                let bytes = match input {
                    Input::Bytes(b) => b.to_vec(),
                    Input::File(path) => tokio::fs::read(path).await.map_err(|e| {
                        KnowledgeError::Unreadable(format!("cannot read `{name}`: {e}"))
                    })?,
                };
                tokio::task::spawn_blocking(move || read_document(&request, &bytes, true))
                    .await
                    .map_err(|e| {
                        KnowledgeError::Unreadable(format!("`{name}` could not be read: {e}"))
                    })?
                    .map_err(KnowledgeError::from)
            }
            Reader::Worker(worker) => worker.read(request, input).await,
        }
    }
}

/// What one document in one worker came to.
enum Attempt {
    /// The worker answered (with chunks, or with "this document is unreadable").
    Answered(Result<Chunked, KnowledgeError>),
    /// The worker failed on it: it crashed, was stopped at a limit, or broke the protocol.
    /// Worth a new worker when the failed one was reused.
    Failed(KnowledgeError),
    /// The document's wall-clock deadline passed and the worker was killed. Never tried
    /// again: a new worker gets the same deadline for the same document.
    TimedOut(KnowledgeError),
}

impl Worker {
    async fn read(
        self: &Arc<Self>,
        mut request: Request,
        input: Input<'_>,
    ) -> Result<Chunked, KnowledgeError> {
        let name = request.name.clone();
        let timeout = self.settings.timeout;
        let _permit = match tokio::time::timeout(timeout, self.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(KnowledgeError::Busy(format!(
                    "`{name}` was not read: {} documents were being read for {}s; try again \
                     later (TROUPE_EXTRACT_WORKERS)",
                    self.settings.workers,
                    timeout.as_secs()
                )));
            }
        };
        let size = match input {
            Input::Bytes(b) => b.len() as u64,
            Input::File(path) => tokio::fs::metadata(path)
                .await
                .map(|m| m.len())
                .map_err(|e| KnowledgeError::Unreadable(format!("cannot read `{name}`: {e}")))?,
        };
        request.bytes = size;
        let mut line = serde_json::to_vec(&request)
            .map_err(|e| KnowledgeError::Unreadable(format!("`{name}` could not be read: {e}")))?;
        line.push(b'\n');
        let size = usize::try_from(size).unwrap_or(usize::MAX);

        // A worker kept from an earlier document first; if it fails on this one, the
        // document gets one more try in a new worker, so that nothing a reused worker
        // carries (its memory, its CPU seconds) can refuse a document a new one would read.
        let mut reused = self.take_idle();
        loop {
            let was_reused = reused.is_some();
            let mut running = match reused.take() {
                Some(r) => r,
                None => self.start(&name)?,
            };
            let started = Instant::now();
            match self.attempt(&mut running, &line, input, size, &name).await {
                Attempt::Answered(result) => {
                    let served = &mut running.served;
                    served.documents += 1;
                    served.input = served.input.saturating_add(request.bytes);
                    served.busy += started.elapsed();
                    tracing::debug!(document = %name, elapsed_ms = started.elapsed().as_millis() as u64,
                        documents = running.served.documents, "document worker done");
                    if size <= REUSE_MAX_INPUT {
                        self.put_idle(running);
                    }
                    return result;
                }
                Attempt::Failed(_) if was_reused => {
                    tracing::debug!(document = %name, "a reused document worker failed; trying a new one");
                }
                Attempt::Failed(e) | Attempt::TimedOut(e) => return Err(e),
            }
        }
    }

    /// A worker from the pool: alive, not too old, not idle too long.
    fn take_idle(&self) -> Option<Running> {
        let mut idle = self.idle.locked();
        while let Some(mut r) = idle.pop() {
            if r.idle_since.elapsed() < IDLE_FOR && matches!(r.child.try_wait(), Ok(None)) {
                return Some(r);
            }
        }
        None
    }

    /// Keeps a worker for the next document, unless it has read its share: at most
    /// [`MAX_DOCUMENTS`] documents, [`MAX_INPUT`] bytes and half its CPU limit, so a
    /// document never meets a worker with less than half of a new one's CPU seconds.
    fn put_idle(self: &Arc<Self>, mut running: Running) {
        if running.served.spent(self.settings.timeout) {
            return;
        }
        running.idle_since = Instant::now();
        let mut idle = self.idle.locked();
        if idle.len() >= self.settings.workers.max(1) {
            return;
        }
        idle.push(running);
        drop(idle);
        // An idle worker holds its tokenizer (tens of MB): it is ended after IDLE_FOR.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let worker = Arc::downgrade(self);
            rt.spawn(async move {
                tokio::time::sleep(IDLE_FOR).await;
                if let Some(worker) = worker.upgrade() {
                    let mut idle = worker.idle.locked();
                    idle.retain(|r| r.idle_since.elapsed() < IDLE_FOR);
                }
            });
        }
    }

    /// A new worker, with its pipes; its stderr is kept (the end of it) by a task.
    fn start(&self, name: &str) -> Result<Running, KnowledgeError> {
        let mut child = self.spawn().map_err(|e| {
            tracing::error!(program = %self.program.display(), error = %e,
                "cannot start the document worker");
            KnowledgeError::Unreadable(format!(
                "`{name}` could not be read: the document reader did not start"
            ))
        })?;
        let started = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        crate::metrics::extract_worker_started();
        tracing::debug!(document = %name, workers_started = started, "document worker started");
        let (Some(stdin), Some(stdout), Some(mut err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(KnowledgeError::Unreadable(format!(
                "`{name}` could not be read: the document reader has no pipes"
            )));
        };
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut kept = kept.locked();
                kept.extend_from_slice(&buf[..n]);
                let over = kept.len().saturating_sub(MAX_STDERR as usize);
                kept.drain(..over);
            }
        });
        Ok(Running {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr,
            served: Served::default(),
            idle_since: Instant::now(),
        })
    }

    /// One document through one worker, within the deadline.
    async fn attempt(
        &self,
        running: &mut Running,
        line: &[u8],
        input: Input<'_>,
        size: usize,
        name: &str,
    ) -> Attempt {
        let timeout = self.settings.timeout;
        let Running {
            stdin,
            stdout,
            child,
            ..
        } = running;
        let work = async {
            let feed = feed(stdin, line, input, size);
            let (_, reply) = tokio::join!(feed, read_reply(&mut *stdout, max_reply(size)));
            reply
        };
        let reply = match tokio::time::timeout(timeout, work).await {
            Ok(reply) => reply,
            Err(_) => {
                // Killed now so it is gone before the permit is given back, not when the
                // runtime gets to it.
                let _ = child.start_kill();
                let _ = child.wait().await;
                tracing::warn!(document = %name, timeout_s = timeout.as_secs(),
                    "document worker killed at its deadline");
                return Attempt::TimedOut(KnowledgeError::Unreadable(format!(
                    "`{name}` could not be read in time: reading it took more than {}s \
                     (TROUPE_EXTRACT_TIMEOUT_SECS); export it as plain text or split it",
                    timeout.as_secs()
                )));
            }
        };
        let (too_long, broken) = match reply {
            Ok(answer) => return Attempt::Answered(answer),
            Err(ReplyError::TooLong(limit)) => (Some(limit), None),
            Err(ReplyError::Broken(why)) => (None, Some(why)),
        };
        // It broke off: most often it died (a crash, a limit), and its status says how; a
        // worker still running after a broken reply is ended.
        let status = match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        let why = describe_exit(status, &self.settings);
        let log = running
            .stderr
            .lock()
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .unwrap_or_default();
        tracing::warn!(document = %name, %why, reply = broken.as_deref().unwrap_or(""),
            stderr = %log, "document worker failed");
        Attempt::Failed(KnowledgeError::Unreadable(match too_long {
            Some(limit) => {
                format!("`{name}` could not be read: it gave more than {limit} bytes of chunks")
            }
            None => format!(
                "`{name}` could not be read in time: the reader {why}; export it as plain \
                 text or split it"
            ),
        }))
    }

    fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            // Nothing of the gateway's environment (tokens, keys) reaches the parser.
            .env_clear()
            .env("_RJEM_MALLOC_CONF", WORKER_MALLOC_CONF)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        {
            let memory = self.settings.memory_bytes;
            let cpu = self.settings.timeout.as_secs().saturating_add(1);
            // Its own process group, so a Ctrl-C at the terminal reaches the gateway, which
            // then kills its workers, rather than both at once.
            cmd.process_group(0);
            // SAFETY: the closure runs between fork and exec and calls only getrlimit and
            // setrlimit, which are async-signal-safe; it allocates nothing.
            unsafe {
                cmd.pre_exec(move || limit_self(memory, cpu));
            }
        }
        cmd.spawn()
    }
}

/// Writes the request line, then the document (exactly `size` bytes of a file), to a
/// worker's stdin. A worker that dies early closes its stdin: the write fails, and its exit
/// status says why. So write errors are not errors here.
async fn feed(stdin: &mut tokio::process::ChildStdin, line: &[u8], input: Input<'_>, size: usize) {
    if stdin.write_all(line).await.is_err() {
        return;
    }
    match input {
        Input::Bytes(b) => {
            let _ = stdin.write_all(b).await;
        }
        Input::File(path) => {
            // Exactly the announced length, even if the file grew meanwhile; one that
            // shrank leaves the worker waiting, until the deadline.
            if let Ok(file) = tokio::fs::File::open(path).await {
                let _ = tokio::io::copy(&mut file.take(size as u64), stdin).await;
            }
        }
    }
    let _ = stdin.flush().await;
}

/// In the forked child, before exec: the worker's resource limits. A limit above the
/// inherited hard limit is lowered to it (raising it would be refused).
#[cfg(unix)]
fn limit_self(memory_bytes: libc::rlim_t, cpu_secs: libc::rlim_t) -> std::io::Result<()> {
    let set = |resource, soft: libc::rlim_t, hard: libc::rlim_t| -> std::io::Result<()> {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit with a valid resource and a pointer to a local.
        unsafe {
            if libc::getrlimit(resource, &mut current) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let max = current.rlim_max;
            let wanted = libc::rlimit {
                rlim_cur: soft.min(max),
                rlim_max: hard.min(max),
            };
            if libc::setrlimit(resource, &wanted) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    set(libc::RLIMIT_AS, memory_bytes, memory_bytes)?;
    // SIGXCPU at the soft limit, SIGKILL a second later.
    set(libc::RLIMIT_CPU, cpu_secs, cpu_secs.saturating_add(1))?;
    set(libc::RLIMIT_FSIZE, 0, 0)?;
    set(libc::RLIMIT_CORE, 0, 0)?;
    set(libc::RLIMIT_NOFILE, WORKER_FILES, WORKER_FILES)?;
    Ok(())
}

/// What a worker's end says, as the end of a sentence: "the reader …".
fn describe_exit(status: Option<ExitStatus>, settings: &ExtractSettings) -> String {
    let Some(status) = status else {
        return "ended without an exit status".into();
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return match signal {
                libc::SIGKILL | libc::SIGXCPU => format!(
                    "was stopped at its CPU limit ({}s) or killed",
                    settings.timeout.as_secs() + 1
                ),
                libc::SIGSEGV | libc::SIGBUS | libc::SIGABRT => format!(
                    "crashed on it (signal {signal}: a stack overflow, a failed allocation \
                     within its {} MB or a parser bug)",
                    settings.memory_bytes >> 20
                ),
                other => format!("was ended by signal {other}"),
            };
        }
    }
    match status.code() {
        Some(0) => "gave an incomplete answer".into(),
        Some(code) => format!(
            "failed (exit code {code}; out of memory within {} MB?)",
            settings.memory_bytes >> 20
        ),
        None => "ended without an exit code".into(),
    }
}

#[derive(Debug)]
enum ReplyError {
    /// Past the output cap, in bytes.
    TooLong(usize),
    /// Cut short or not in the protocol.
    Broken(String),
}

/// The worker's reply: the answer line, then the chunks, within `budget` bytes.
async fn read_reply<R: AsyncBufRead + Unpin>(
    out: &mut R,
    budget: usize,
) -> Result<Result<Chunked, KnowledgeError>, ReplyError> {
    let mut line = Vec::new();
    (&mut *out)
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| ReplyError::Broken(e.to_string()))?;
    let reply: Reply =
        serde_json::from_slice(&line).map_err(|e| ReplyError::Broken(e.to_string()))?;
    let (content_type, count) = match reply {
        Reply::Ok {
            content_type,
            chunks,
        } => (content_type, chunks),
        Reply::Unsupported { detail } => return Ok(Err(KnowledgeError::Unsupported(detail))),
        Reply::Unreadable { detail } => return Ok(Err(KnowledgeError::Unreadable(detail))),
    };
    let format = Format::from_content_type(&content_type)
        .ok_or_else(|| ReplyError::Broken(format!("unknown format `{content_type}`")))?;
    let mut used = line.len();
    let mut chunks = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let mut len = [0u8; 4];
        out.read_exact(&mut len)
            .await
            .map_err(|e| ReplyError::Broken(e.to_string()))?;
        let len = u32::from_le_bytes(len) as usize;
        used = used.saturating_add(4 + len);
        if used > budget {
            return Err(ReplyError::TooLong(budget));
        }
        let mut text = vec![0u8; len];
        out.read_exact(&mut text)
            .await
            .map_err(|e| ReplyError::Broken(e.to_string()))?;
        chunks.push(String::from_utf8(text).map_err(|e| ReplyError::Broken(e.to_string()))?);
    }
    Ok(Ok(Chunked {
        format,
        chunks,
        terms: Vec::new(),
    }))
}

/// `troupe extract`: the worker. Reads requests from stdin, each a line and the document's
/// bytes, and answers each on stdout, until its input ends; exits 0 whenever it could
/// answer, including "this file is unreadable". It reads no configuration and writes no
/// log: everything it knows comes in the requests.
pub fn worker_main() -> ExitCode {
    let mut input = std::io::BufReader::new(std::io::stdin().lock());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut input).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) => {
                eprintln!("troupe extract: cannot read the request: {e}");
                return ExitCode::from(2);
            }
        }
        let request: Request = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "troupe extract: the request line is not valid ({e}); this command is \
                     started by troupe itself, with documents on stdin"
                );
                return ExitCode::from(2);
            }
        };
        let mut bytes = Vec::new();
        match (&mut input).take(request.bytes).read_to_end(&mut bytes) {
            Ok(n) if n as u64 == request.bytes => {}
            Ok(n) => {
                eprintln!(
                    "troupe extract: the document ended after {n} of {} bytes",
                    request.bytes
                );
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("troupe extract: cannot read the document: {e}");
                return ExitCode::from(2);
            }
        }
        // Chunks only: the gateway's index analyzes them as it takes them, and the
        // reply's bound stays what it was.
        let result = read_document(&request, &bytes, false);
        drop(bytes);
        if let Err(e) = write_reply(&mut out, result).and_then(|()| out.flush()) {
            eprintln!("troupe extract: cannot write the answer: {e}");
            return ExitCode::from(2);
        }
    }
}

fn write_reply(out: &mut impl Write, result: Result<Chunked, ExtractError>) -> std::io::Result<()> {
    let (reply, chunks) = match result {
        Ok(Chunked { format, chunks, .. }) => (
            Reply::Ok {
                content_type: format.content_type().to_string(),
                chunks: chunks.len(),
            },
            chunks,
        ),
        Err(ExtractError::Unsupported(detail)) => (Reply::Unsupported { detail }, Vec::new()),
        Err(ExtractError::Unreadable(detail)) => (Reply::Unreadable { detail }, Vec::new()),
    };
    serde_json::to_writer(&mut *out, &reply)?;
    out.write_all(b"\n")?;
    for chunk in &chunks {
        let len =
            u32::try_from(chunk.len()).map_err(|_| std::io::Error::other("a chunk over 4 GiB"))?;
        out.write_all(&len.to_le_bytes())?;
        out.write_all(chunk.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn request() -> Request {
        Request {
            name: "a.txt".into(),
            content_type: None,
            chunk_tokens: 400,
            chunk_overlap: 50,
            bytes: 0,
        }
    }

    async fn decode(
        bytes: Vec<u8>,
        budget: usize,
    ) -> Result<Result<Chunked, KnowledgeError>, ReplyError> {
        read_reply(&mut BufReader::new(&bytes[..]), budget).await
    }

    #[test]
    fn a_worker_is_ended_after_its_documents_its_input_or_half_the_deadline() {
        let timeout = Duration::from_secs(20);
        let mut served = Served {
            documents: MAX_DOCUMENTS - 1,
            input: MAX_INPUT - 1,
            busy: timeout / 2 - Duration::from_millis(1),
        };
        assert!(
            !served.spent(timeout),
            "a folder of small files keeps its worker"
        );
        served.documents += 1;
        assert!(served.spent(timeout), "documents");
        served.documents -= 1;
        served.input += 1;
        assert!(served.spent(timeout), "input");
        served.input -= 1;
        served.busy += Duration::from_millis(1);
        assert!(served.spent(timeout), "CPU");
    }

    #[tokio::test]
    async fn the_reply_round_trips() {
        let mut out = Vec::new();
        let done = read_document(&request(), b"The ferry leaves at noon.", false).unwrap();
        write_reply(&mut out, Ok(done.clone())).unwrap();
        assert_eq!(decode(out.clone(), 1 << 20).await.unwrap().unwrap(), done);
        assert!(matches!(
            decode(out, 10).await,
            Err(ReplyError::TooLong(10))
        ));

        let mut out = Vec::new();
        write_reply(&mut out, Err(ExtractError::Unsupported("a PNG".into()))).unwrap();
        assert!(matches!(
            decode(out, 1 << 20).await.unwrap(),
            Err(KnowledgeError::Unsupported(why)) if why == "a PNG"
        ));
        // Cut short: the worker died while writing.
        let mut out = Vec::new();
        write_reply(&mut out, Ok(done)).unwrap();
        out.truncate(out.len() - 3);
        assert!(matches!(
            decode(out, 1 << 20).await,
            Err(ReplyError::Broken(_))
        ));
    }

    #[test]
    fn text_that_grows_past_its_bound_is_refused() {
        // 8 bytes of JSON whose flattened text would be small: accepted; the bound is
        // relative to the input plus a megabyte of slack.
        assert!(read_document(&request(), b"{\"a\": 1}", false).is_ok());
        assert!(max_text(10) > 10 * TEXT_FACTOR);
        assert!(max_reply(10) > max_text(10));
    }

    fn sh(script: &str, settings: ExtractSettings) -> Reader {
        Reader::Worker(Arc::new(Worker::new(
            "/bin/sh".into(),
            vec!["-c".into(), script.into()],
            settings,
        )))
    }

    async fn read_with(reader: &Reader) -> Result<Chunked, KnowledgeError> {
        reader
            .read("doc.txt", None, Input::Bytes(b"some words"), (400, 50))
            .await
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_worker_that_hangs_is_killed_at_its_deadline() {
        let settings = ExtractSettings {
            timeout: Duration::from_millis(300),
            ..ExtractSettings::default()
        };
        // `exec` so that the shell is the sleeper, and killing it leaves nothing behind.
        let err = read_with(&sh("exec sleep 30", settings)).await.unwrap_err();
        match err {
            KnowledgeError::Unreadable(why) => {
                assert!(why.contains("could not be read in time"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_worker_that_crashes_is_a_clear_error() {
        let err = read_with(&sh("kill -SEGV $$", ExtractSettings::default()))
            .await
            .unwrap_err();
        match err {
            KnowledgeError::Unreadable(why) => {
                assert!(why.contains("doc.txt") && why.contains("crashed"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_worker_runs_within_its_limits() {
        // A stand-in worker that answers only when its limits and its empty environment
        // hold, and otherwise exits 1 (which the reader reports as a failure).
        let script = "[ \"$(ulimit -f)\" = 0 ] && [ \"$(ulimit -n)\" -le 32 ] \
                      && [ \"$(ulimit -v)\" -le 65536 ] && [ -z \"$HOME\" ] \
                      && head -n 1 >/dev/null \
                      && printf '{\"status\":\"ok\",\"contentType\":\"text/plain\",\"chunks\":0}\\n'";
        let settings = ExtractSettings {
            memory_bytes: 64 << 20,
            ..ExtractSettings::default()
        };
        let done = read_with(&sh(script, settings)).await.unwrap();
        assert_eq!(done.format, Format::Text);
        assert!(done.chunks.is_empty());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_worker_is_kept_for_the_next_document() {
        // A stand-in worker that answers every request with one chunk: its process id.
        let script = r#"while IFS= read -r line; do
              n=$(printf '%s' "$line" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
              head -c "$n" >/dev/null
              printf '{"status":"ok","contentType":"text/plain","chunks":1}\n'
              printf '\010\000\000\000%08d' $$
            done"#;
        let reader = sh(script, ExtractSettings::default());
        let first = read_with(&reader).await.unwrap();
        let second = read_with(&reader).await.unwrap();
        assert_eq!(first.chunks.len(), 1);
        assert_eq!(first, second, "the second document went to the same worker");
    }

    /// Issue 30, finding 6: a document that reaches its deadline in a reused worker is
    /// not tried again in a new one (which doubled the time it held a worker slot), while
    /// a reused worker that crashes still gets its document a new worker.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_deadline_is_not_retried_in_a_new_worker() {
        // A stand-in worker that answers every request with one empty chunk, except a
        // document named `hang.txt`, on which it hangs, and `crash.txt`, on which it dies.
        let script = r#"while IFS= read -r line; do
              n=$(printf '%s' "$line" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
              head -c "$n" >/dev/null
              case "$line" in
                *'"name":"hang.txt"'*) exec sleep 30 ;;
                *'"name":"crash.txt"'*) kill -SEGV $$ ;;
              esac
              printf '{"status":"ok","contentType":"text/plain","chunks":0}\n'
            done"#;
        let settings = ExtractSettings {
            // Long enough that the first document leaves its worker to be reused (a
            // worker busy for half the deadline is not kept), short for the test.
            timeout: Duration::from_secs(2),
            workers: 1,
            ..ExtractSettings::default()
        };
        let worker = Arc::new(Worker::new(
            "/bin/sh".into(),
            vec!["-c".into(), script.into()],
            settings,
        ));
        let reader = Reader::Worker(worker.clone());
        let started = || worker.started.load(std::sync::atomic::Ordering::Relaxed);
        let read = |name: &'static str| {
            let reader = reader.clone();
            async move {
                reader
                    .read(name, None, Input::Bytes(b"some words"), (400, 50))
                    .await
            }
        };

        read("first.txt").await.unwrap();
        assert_eq!(started(), 1);
        // The hanging document meets the kept worker, which is killed at the deadline; no
        // second worker is started for it.
        let err = read("hang.txt").await.unwrap_err();
        assert!(
            matches!(&err, KnowledgeError::Unreadable(why) if why.contains("could not be read in time")),
            "{err:?}"
        );
        assert_eq!(
            started(),
            1,
            "the document that hit its deadline was tried again"
        );

        // A crash in a reused worker is still worth one new worker.
        read("second.txt").await.unwrap();
        assert_eq!(started(), 2);
        let err = read("crash.txt").await.unwrap_err();
        assert!(
            matches!(&err, KnowledgeError::Unreadable(why) if why.contains("crashed")),
            "{err:?}"
        );
        assert_eq!(started(), 3, "the crash in a reused worker was not retried");
    }

    #[tokio::test]
    async fn waiting_for_a_worker_is_bounded() {
        let settings = ExtractSettings {
            timeout: Duration::from_millis(200),
            workers: 1,
            ..ExtractSettings::default()
        };
        let worker = Arc::new(Worker::new("/bin/true".into(), Vec::new(), settings));
        let _busy = worker.permits.acquire().await.unwrap();
        let err = read_with(&Reader::Worker(worker.clone()))
            .await
            .unwrap_err();
        assert!(matches!(err, KnowledgeError::Busy(_)), "{err:?}");
    }
}
