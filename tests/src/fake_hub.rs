//! A fake Hugging Face Hub: one model repository served from a directory, on the hub's
//! documented routes, for `troupe models pull` (issue 36).
//!
//! - `GET /api/models/{repo}/revision/{rev}`: the repository's metadata, `sha` (the commit)
//!   and `siblings`; with `?blobs=true` each sibling also has `size`, `blobId` (its git blob
//!   id) and, for a file kept in LFS, `lfs: {sha256, size, pointerSize}`.
//! - `GET`/`HEAD /{repo}/resolve/{rev}/{file}`: the file, with the headers the hub's
//!   clients read: `X-Repo-Commit`, `ETag` (the git blob id, or for LFS the sha256),
//!   `X-Linked-Etag` and `X-Linked-Size` (LFS only), `Content-Length`, `Accept-Ranges`, and
//!   `Range: bytes=N-` / `bytes=N-M` answered with 206 and `Content-Range` (416 past the end).
//!
//! As on the hub, `*.safetensors` (and any file over 10 MB) is an LFS file. A test can cut
//! the connection partway through a file (once), serve a file whose bytes differ from the
//! hash the metadata publishes, announce a size in the metadata other than the file's (a
//! 50 GB model), or require a token. Every request is recorded (its path,
//! `Range` and `Authorization`), and waits wake on each one ([`crate::wait`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha1::Digest;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::Diagnose;

/// The commit every file is served at.
pub const COMMIT: &str = "3c1f2a9e8b7d6c5b4a39281706f5e4d3c2b1a098";

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRequest {
    pub method: String,
    /// The path and query.
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct File {
    bytes: Vec<u8>,
    lfs: bool,
    sha256: String,
    git_oid: String,
}

#[derive(Default)]
struct Faults {
    /// The next GET of this file sends this many bytes, then the connection is cut.
    cut: Option<(String, usize)>,
    /// Files served with one byte changed (the metadata still names the true hash).
    corrupt: Vec<String>,
    /// A bearer token every request must carry.
    token: Option<String>,
    /// Sizes the metadata announces instead of the files' own.
    announced: BTreeMap<String, u64>,
}

struct Shared {
    repo: String,
    files: BTreeMap<String, File>,
    faults: Mutex<Faults>,
    seen: Mutex<Vec<HubRequest>>,
    count: watch::Sender<usize>,
    /// A file whose GETs wait until [`FakeHub::release`].
    held: watch::Sender<Option<String>>,
}

/// The running fake. Dropping it stops it.
pub struct FakeHub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl FakeHub {
    /// Serves every file under `dir` (recursively, hidden files skipped) as model `repo`
    /// (`owner/name`).
    pub async fn start(repo: &str, dir: &Path) -> FakeHub {
        let mut files = BTreeMap::new();
        collect(dir, dir, &mut files);
        assert!(!files.is_empty(), "no files to serve in {}", dir.display());
        let shared = Arc::new(Shared {
            repo: repo.to_string(),
            files,
            faults: Mutex::new(Faults::default()),
            seen: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            held: watch::Sender::new(None),
        });
        let app = Router::new().fallback(serve).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake hub");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeHub {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`: what `HF_ENDPOINT` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next GET of `file` sends its first `bytes` bytes, then the connection is cut.
    pub fn cut_next_download(&self, file: &str, bytes: usize) {
        self.faults().cut = Some((file.to_string(), bytes));
    }

    /// `file` is served with one byte changed; the metadata keeps the true hash.
    pub fn corrupt(&self, file: &str) {
        self.faults().corrupt.push(file.to_string());
    }

    /// The metadata announces `file` as `size` bytes (its `size` and `lfs.size`); the file
    /// itself is served as it is.
    pub fn announce_size(&self, file: &str, size: u64) {
        self.faults().announced.insert(file.to_string(), size);
    }

    /// Every request must carry `Authorization: Bearer {token}`, else 401.
    pub fn require_token(&self, token: &str) {
        self.faults().token = Some(token.to_string());
    }

    /// GETs of `file` wait (their request recorded) until [`FakeHub::release`]: a download
    /// that is under way for as long as a test needs.
    pub fn hold(&self, file: &str) {
        self.shared.held.send_replace(Some(file.to_string()));
    }

    /// Lets held downloads go on.
    pub fn release(&self) {
        self.shared.held.send_replace(None);
    }

    /// Waits until `file` has been asked for (GET) `n` times.
    pub async fn wait_for_downloads(&self, file: &str, n: usize) {
        crate::wait::until_or_report(
            self,
            self.shared.count.subscribe(),
            crate::WAIT,
            format!("{n} download(s) of {file}"),
            || (self.downloads_of(file).len() >= n).then_some(()),
        )
        .await
        .unwrap_or_else(|report| panic!("{report}"));
    }

    /// The bytes of `file` as served without faults.
    pub fn file(&self, name: &str) -> &[u8] {
        &self.shared.files[name].bytes
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<HubRequest> {
        lock(&self.shared.seen).clone()
    }

    /// The GETs of `file`'s resolve route so far.
    pub fn downloads_of(&self, file: &str) -> Vec<HubRequest> {
        let suffix = format!("/resolve/{COMMIT}/{file}");
        self.requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.ends_with(&suffix))
            .collect()
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        lock(&self.shared.faults)
    }
}

/// Runs `BIN models pull ARGS` (`BIN` a troupe executable) with `HF_ENDPOINT` =
/// `endpoint`, the model directory `model_dir`, `extra` environment, and none of this
/// process's `TROUPE_*` or `HF_*` settings: what a user's pull from that hub does.
#[allow(clippy::disallowed_methods)] // reads this process's settings to keep them out
pub async fn pull(
    bin: &Path,
    endpoint: &str,
    model_dir: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("models").arg("pull").args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("TROUPE_") || key.starts_with("HF_") || key == "HUGGING_FACE_HUB_TOKEN" {
            cmd.env_remove(key);
        }
    }
    cmd.env("HF_ENDPOINT", endpoint)
        .env("TROUPE_EMBEDDING_MODEL_DIR", model_dir)
        .env("NO_PROXY", "127.0.0.1")
        .env("no_proxy", "127.0.0.1")
        .env("NO_COLOR", "1");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().await.expect("run troupe models pull")
}

impl Diagnose for FakeHub {
    fn diagnostics(&self) -> String {
        crate::wait::lines(
            "the fake hub saw:",
            self.requests()
                .iter()
                .map(|r| format!("{} {} range={:?}", r.method, r.path, r.range)),
        )
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn collect(root: &Path, dir: &Path, files: &mut BTreeMap<String, File>) {
    let entries = std::fs::read_dir(dir).expect("read the model directory");
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
            continue;
        }
        let bytes = std::fs::read(&path).expect("read a model file");
        let rel = path
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let lfs = rel.ends_with(".safetensors") || bytes.len() > 10 << 20;
        let sha256 = hex::encode(&sha2::Sha256::digest(&bytes)[..]);
        let mut git = sha1::Sha1::new();
        git.update(format!("blob {}\0", bytes.len()).as_bytes());
        git.update(&bytes);
        let git_oid = hex::encode(&git.finalize()[..]);
        files.insert(
            rel,
            File {
                bytes,
                lfs,
                sha256,
                git_oid,
            },
        );
    }
}

async fn serve(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let headers = request.headers().clone();
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let path = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_string(), |p| p.to_string());
    lock(&shared.seen).push(HubRequest {
        method: request.method().to_string(),
        path: path.clone(),
        range: text(header::RANGE),
        authorization: text(header::AUTHORIZATION),
    });
    shared.count.send_modify(|n| *n += 1);
    let token = lock(&shared.faults).token.clone();
    if let Some(token) = token
        && text(header::AUTHORIZATION) != Some(format!("Bearer {token}"))
    {
        return error(
            StatusCode::UNAUTHORIZED,
            "Invalid credentials in Authorization header",
        );
    }
    let uri_path = request.uri().path();
    let query = request.uri().query().unwrap_or("");
    let info_prefix = format!("/api/models/{}/revision/", shared.repo);
    let resolve_prefix = format!("/{}/resolve/", shared.repo);
    if let Some(rev) = uri_path.strip_prefix(&info_prefix) {
        let announced = lock(&shared.faults).announced.clone();
        return info(&shared, rev, query.contains("blobs=true"), &announced);
    }
    if let Some(rest) = uri_path.strip_prefix(&resolve_prefix)
        && let Some((rev, file)) = rest.split_once('/')
    {
        if request.method() == Method::GET {
            let mut held = shared.held.subscribe();
            let _ = held.wait_for(|h| h.as_deref() != Some(file)).await;
        }
        return resolve(&shared, rev, file, request.method(), &headers);
    }
    error(StatusCode::NOT_FOUND, "Repository not found")
}

fn known_revision(rev: &str) -> bool {
    rev == "main" || rev == COMMIT
}

fn info(shared: &Shared, rev: &str, blobs: bool, announced: &BTreeMap<String, u64>) -> Response {
    if !known_revision(rev) {
        return error(StatusCode::NOT_FOUND, "Invalid rev id");
    }
    let siblings: Vec<_> = shared
        .files
        .iter()
        .map(|(name, f)| {
            let size = announced.get(name).copied().unwrap_or(f.bytes.len() as u64);
            match (blobs, f.lfs) {
                (false, _) => json!({ "rfilename": name }),
                (true, false) => json!({ "rfilename": name, "blobId": f.git_oid, "size": size }),
                (true, true) => json!({
                    "rfilename": name,
                    "blobId": f.git_oid,
                    "size": size,
                    "lfs": { "sha256": f.sha256, "size": size, "pointerSize": 134 },
                }),
            }
        })
        .collect();
    axum::Json(json!({
        "_id": "6a1f0c2b9e8d7f6a5b4c3d2e",
        "id": shared.repo,
        "modelId": shared.repo,
        "sha": COMMIT,
        "private": false,
        "gated": false,
        "library_name": "sentence-transformers",
        "siblings": siblings,
    }))
    .into_response()
}

fn resolve(shared: &Shared, rev: &str, name: &str, method: &Method, req: &HeaderMap) -> Response {
    if !known_revision(rev) {
        return error(StatusCode::NOT_FOUND, "Invalid rev id");
    }
    let Some(file) = shared.files.get(name) else {
        return error(StatusCode::NOT_FOUND, "Entry not found");
    };
    let mut bytes = file.bytes.clone();
    if lock(&shared.faults).corrupt.iter().any(|c| c == name) && !bytes.is_empty() {
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x5a;
    }
    let total = bytes.len();
    let range = req
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_range);
    let (status, start, end) = match range {
        None => (StatusCode::OK, 0, total),
        Some((start, _)) if start >= total => {
            let mut r = error(StatusCode::RANGE_NOT_SATISFIABLE, "Range Not Satisfiable");
            r.headers_mut()
                .insert(header::CONTENT_RANGE, value(&format!("bytes */{total}")));
            return r;
        }
        Some((start, end)) => (
            StatusCode::PARTIAL_CONTENT,
            start,
            end.map_or(total, |e| (e + 1).min(total)),
        ),
    };
    let mut headers = HeaderMap::new();
    headers.insert("x-repo-commit", value(COMMIT));
    headers.insert(header::ACCEPT_RANGES, value("bytes"));
    headers.insert(header::CONTENT_LENGTH, value(&(end - start).to_string()));
    if file.lfs {
        headers.insert(header::ETAG, value(&format!("\"{}\"", file.sha256)));
        headers.insert("x-linked-etag", value(&format!("\"{}\"", file.sha256)));
        headers.insert("x-linked-size", value(&total.to_string()));
    } else {
        headers.insert(header::ETAG, value(&format!("\"{}\"", file.git_oid)));
    }
    if status == StatusCode::PARTIAL_CONTENT {
        headers.insert(
            header::CONTENT_RANGE,
            value(&format!("bytes {start}-{}/{total}", end.saturating_sub(1))),
        );
    }
    if method == Method::HEAD {
        return (status, headers).into_response();
    }
    let body = bytes[start..end].to_vec();
    let cut = {
        let mut faults = lock(&shared.faults);
        match &faults.cut {
            Some((f, n)) if f == name => {
                let n = *n;
                faults.cut = None;
                Some(n.min(body.len()))
            }
            _ => None,
        }
    };
    match cut {
        None => (status, headers, body).into_response(),
        Some(n) => {
            // The announced length, then fewer bytes and an error: hyper drops the
            // connection mid-body, as a network cut would.
            let first: Result<axum::body::Bytes, std::io::Error> =
                Ok(axum::body::Bytes::copy_from_slice(&body[..n]));
            let cut: Result<axum::body::Bytes, std::io::Error> =
                Err(std::io::Error::other("the fake hub cut the connection"));
            let stream = futures::stream::iter([first, cut]);
            (status, headers, Body::from_stream(stream)).into_response()
        }
    }
}

/// `bytes=N-` or `bytes=N-M`.
fn parse_range(raw: &str) -> Option<(usize, Option<usize>)> {
    let (start, end) = raw.strip_prefix("bytes=")?.split_once('-')?;
    let start = start.trim().parse().ok()?;
    let end = match end.trim() {
        "" => None,
        e => Some(e.parse().ok()?),
    };
    Some((start, end))
}

fn value(v: &str) -> HeaderValue {
    HeaderValue::from_str(v).expect("a valid header value")
}

/// The hub's error answer: `X-Error-Message` and a JSON `error`.
fn error(status: StatusCode, message: &str) -> Response {
    let mut r = (status, axum::Json(json!({ "error": message }))).into_response();
    r.headers_mut().insert("x-error-message", value(message));
    r
}
