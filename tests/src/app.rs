//! The harness that runs the real `troupe` binary: `troupe run` as a child process in a
//! fresh temp dir, against a fresh SQLite file or Postgres database and the fakes.
//!
//! It owns the child's environment (inherited `TROUPE_*`, `OPENAI_*`, platform variables
//! are cleared), port discovery (the `listening on http://127.0.0.1:PORT` line on stdout,
//! then `GET /healthz`), log capture, restart and kill. It knows nothing of the gateway's
//! crates: it talks HTTP only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::fake_openai::FakeOpenAi;
use crate::multipart::{self, Part};

/// How long the binary may take to print its address and answer `/healthz`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);
/// How long a graceful stop may take after SIGTERM before the harness gives up.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// A guard on every HTTP call to the app, so a hanging route fails the test instead of
/// hanging it.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

/// Environment prefixes that must not leak from the developer's shell into the child.
const CLEARED_PREFIXES: &[&str] = &[
    "TROUPE_",
    "OPENAI_",
    "ANTHROPIC_",
    "OLLAMA_",
    "DISCORD_",
    "TELEGRAM_",
    "FARCASTER_",
    "NEYNAR_",
    "CHARACTER.",
    "HF_",
];

/// Which database the app runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A fresh `troupe.db` in the app's temp dir.
    Sqlite,
    /// A fresh database `troupe_e2e_<uuid>` on the server named by `TROUPE_TEST_DATABASE_URL`.
    Postgres,
}

impl Backend {
    /// `Some(self)` when this backend can run here. Postgres needs
    /// `TROUPE_TEST_DATABASE_URL`: without it the test is skipped with a note, except under
    /// `CI=true`, where it fails.
    pub fn or_skip(self, test: &str) -> Option<Backend> {
        match self {
            Backend::Sqlite => Some(self),
            Backend::Postgres => crate::env::postgres_url(test).map(|_| self),
        }
    }
}

/// A minimal valid elizaOS v0 character file, with `"modelProvider": "openai"`.
pub fn persona_json(name: &str, bio: &str) -> Value {
    json!({
        "name": name,
        "username": name.to_lowercase(),
        "modelProvider": "openai",
        "clients": [],
        "plugins": [],
        "bio": [bio],
        "lore": [format!("{name} was written for the troupe end-to-end tests.")],
        "messageExamples": [[
            {"user": "{{user1}}", "content": {"text": "Good morning."}},
            {"user": name, "content": {"text": "Good morning to you."}}
        ]],
        "postExamples": [],
        "topics": ["weather"],
        "adjectives": ["calm"],
        "style": {"all": ["be brief"], "chat": ["answer the question asked"], "post": []},
        "settings": {"secrets": {}}
    })
}

/// Polls `check` until it returns true, panicking with `what` after `timeout`. For state
/// that has no event to wait on (a row written by the gateway in the background): the
/// interval is a poll period, the timeout a hang guard, and neither is asserted.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("still not true after {timeout:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One try at posting `body` to `url`, the messages route of one of several replicas: the
/// reply texts on a 2xx; `None` when that replica is down or answered 5xx, so that the
/// caller tries again (on another one); a panic on any other status.
pub async fn try_post_message(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> Option<Vec<String>> {
    match client.post(url).json(body).send().await {
        Ok(r) if r.status().is_success() => {
            let v: Value = r.json().await.expect("reply JSON");
            let replies = v["replies"].as_array().expect("replies");
            Some(
                replies
                    .iter()
                    .map(|r| r["text"].as_str().unwrap_or_default().to_string())
                    .collect(),
            )
        }
        Ok(r) if r.status().is_server_error() => None,
        Ok(r) => panic!("{url} answered {}", r.status()),
        Err(_) => None,
    }
}

/// Whether any string anywhere in `value` (keys excluded) contains `needle`.
pub fn json_contains_text(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|v| json_contains_text(v, needle)),
        Value::Object(map) => map.values().any(|v| json_contains_text(v, needle)),
        _ => false,
    }
}

/// How to start a [`TestApp`].
#[derive(Debug, Clone)]
pub struct TestAppOptions {
    pub backend: Backend,
    /// Character files written to `<tmp>/personas/<file name>`.
    pub personas: Vec<(String, Value)>,
    /// `OPENAI_BASE_URL` and `OPENAI_API_KEY`; `None` leaves the model provider unconfigured.
    pub openai: Option<(String, String)>,
    /// `TROUPE_API_TOKEN`; also sent by [`TestApp::post_message`].
    pub api_token: Option<String>,
    /// Extra environment, applied last.
    pub env: Vec<(String, String)>,
    /// Use this database instead of creating one: a second replica of another `TestApp`
    /// (see [`TestApp::replica_options`]).
    pub database_url: Option<String>,
}

impl TestAppOptions {
    pub fn new(backend: Backend) -> Self {
        TestAppOptions {
            backend,
            personas: Vec::new(),
            openai: None,
            api_token: None,
            env: Vec::new(),
            database_url: None,
        }
    }
    /// Adds `<name lower-cased>.json` from [`persona_json`].
    pub fn persona(self, name: &str, bio: &str) -> Self {
        self.persona_file(
            &format!("{}.json", name.to_lowercase()),
            persona_json(name, bio),
        )
    }
    pub fn persona_file(mut self, file_name: &str, character: Value) -> Self {
        self.personas.push((file_name.to_string(), character));
        self
    }
    /// Points the OpenAI provider at `fake` (its base URL and key).
    pub fn openai(mut self, fake: &FakeOpenAi) -> Self {
        let key = fake.api_key().unwrap_or("test-key").to_string();
        self.openai = Some((fake.base_url(), key));
        self
    }
    pub fn api_token(mut self, token: &str) -> Self {
        self.api_token = Some(token.to_string());
        self
    }
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
    /// Shares an existing database instead of creating a fresh one.
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }
}

/// Where the app's database lives; kept across restarts.
#[derive(Debug, Clone)]
struct Database {
    url: String,
}

impl Database {
    async fn create(backend: Backend, dir: &Path) -> Database {
        match backend {
            Backend::Sqlite => Database {
                url: format!("sqlite://{}", dir.join("troupe.db").display()),
            },
            Backend::Postgres => Database {
                url: create_postgres_database().await,
            },
        }
    }
}

/// Creates `troupe_e2e_<uuid>` on the server of `TROUPE_TEST_DATABASE_URL` and returns
/// the URL of the new database.
async fn create_postgres_database() -> String {
    use sqlx::Connection;
    let base = crate::env::postgres_url_if_set()
        .expect("Backend::Postgres needs TROUPE_TEST_DATABASE_URL (call Backend::or_skip first)");
    let name = format!("troupe_e2e_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&base)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect to TROUPE_TEST_DATABASE_URL ({}): {e}",
                redact_url(&base)
            )
        });
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(r#"CREATE DATABASE "{name}""#)))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    let _ = conn.close().await;
    let mut url = reqwest::Url::parse(&base)
        .unwrap_or_else(|e| panic!("TROUPE_TEST_DATABASE_URL is not a URL: {e}"));
    url.set_path(&format!("/{name}"));
    url.to_string()
}

fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "(unparsable)".into(),
    }
}

/// The path of the `troupe` binary: `TROUPE_BIN`, else `target/<profile>/troupe` next to
/// this test executable.
pub fn troupe_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TROUPE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // .../target/<profile>/deps/<test> → .../target/<profile>/troupe
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let bin = profile_dir.join(format!("troupe{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        panic!(
            "the troupe binary is missing at {}: build it first: cargo build -p troupe (or set TROUPE_BIN)",
            bin.display()
        );
    }
    bin
}

/// Everything the child printed, stdout and stderr interleaved in arrival order.
#[derive(Debug, Clone, Default)]
struct Logs(Arc<Mutex<String>>);

impl Logs {
    fn push(&self, line: &str) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.push_str(line);
        s.push('\n');
    }
    fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Removes ANSI escape sequences (colours) from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The address in a `listening on http://127.0.0.1:PORT` line.
fn parse_listening(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on http://")? + "listening on http://".len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    addr.parse().ok()
}

fn drain<R: AsyncRead + Unpin + Send + 'static>(
    reader: R,
    logs: Logs,
    mut port_tx: Option<oneshot::Sender<SocketAddr>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = strip_ansi(&line);
            logs.push(&line);
            if port_tx.is_some()
                && let Some(addr) = parse_listening(&line)
                && let Some(tx) = port_tx.take()
            {
                let _ = tx.send(addr);
            }
        }
    })
}

struct Running {
    child: Child,
    readers: Vec<JoinHandle<()>>,
}

/// The real `troupe run`, on its own temp dir and database. Dropping it kills the child.
pub struct TestApp {
    // Declared before `dir` so the child dies before its directory is removed.
    running: Option<Running>,
    addr: SocketAddr,
    options: TestAppOptions,
    database: Database,
    logs: Logs,
    starts: usize,
    /// Set when a panic message already carries the logs.
    logs_reported: bool,
    client: reqwest::Client,
    dir: tempfile::TempDir,
}

impl TestApp {
    /// Writes the personas, creates the database, starts the binary and waits until
    /// `/healthz` answers 200. Panics with the captured output when it does not.
    pub async fn spawn(options: TestAppOptions) -> TestApp {
        let dir = tempfile::Builder::new()
            .prefix("troupe-e2e-")
            .tempdir()
            .expect("temp dir");
        let personas = dir.path().join("personas");
        std::fs::create_dir_all(&personas).expect("create personas dir");
        for (file, character) in &options.personas {
            let text = serde_json::to_string_pretty(character).expect("character JSON");
            std::fs::write(personas.join(file), text).expect("write character file");
        }
        let database = match &options.database_url {
            Some(url) => Database { url: url.clone() },
            None => Database::create(options.backend, dir.path()).await,
        };
        let client = crate::http_client()
            .no_proxy()
            .timeout(REQUEST_DEADLINE)
            .build()
            .expect("reqwest client");
        let mut app = TestApp {
            running: None,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            options,
            database,
            logs: Logs::default(),
            starts: 0,
            logs_reported: false,
            client,
            dir,
        };
        app.start().await;
        app
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(troupe_bin());
        cmd.arg("run").current_dir(self.dir.path());
        for (key, _) in std::env::vars_os() {
            if let Some(k) = key.to_str()
                && (CLEARED_PREFIXES.iter().any(|p| k.starts_with(p)) || k == "RUST_LOG")
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("TROUPE_HTTP_ADDR", "127.0.0.1:0")
            .env("TROUPE_DATABASE_URL", &self.database.url)
            .env("TROUPE_PERSONAS", self.dir.path().join("personas"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            // The fakes serve attachments on loopback, which the fetch policy refuses by
            // default; a test of that policy sets its own with `env`.
            .env("TROUPE_FETCH_ALLOW", "127.0.0.1");
        if let Some((base_url, key)) = &self.options.openai {
            cmd.env("OPENAI_BASE_URL", base_url)
                .env("OPENAI_API_KEY", key);
        }
        if let Some(token) = &self.options.api_token {
            cmd.env("TROUPE_API_TOKEN", token);
        }
        for (k, v) in &self.options.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn start(&mut self) {
        assert!(self.running.is_none(), "start: the app is already running");
        self.starts += 1;
        self.logs
            .push(&format!("===== troupe-e2e: start #{} =====", self.starts));
        let mut child = self
            .command()
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", troupe_bin().display()));
        let (port_tx, port_rx) = oneshot::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let readers = vec![
            drain(stdout, self.logs.clone(), Some(port_tx)),
            drain(stderr, self.logs.clone(), None),
        ];
        self.running = Some(Running { child, readers });

        let addr = match tokio::time::timeout(STARTUP_DEADLINE, port_rx).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_)) => {
                self.fail("troupe closed stdout (exited?) before printing `listening on http://…`")
                    .await
            }
            Err(_) => {
                self.fail(&format!(
                    "troupe printed no `listening on http://…` line within {STARTUP_DEADLINE:?}"
                ))
                .await
            }
        };
        self.addr = addr;

        let deadline = tokio::time::Instant::now() + STARTUP_DEADLINE;
        loop {
            let last = match self.client.get(self.url("/healthz")).send().await {
                Ok(r) if r.status() == StatusCode::OK => return,
                Ok(r) => format!("status {}", r.status()),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                self.fail(&format!(
                    "GET /healthz did not answer 200 within {STARTUP_DEADLINE:?}; last: {last}"
                ))
                .await;
            }
            if let Some(status) = self
                .running
                .as_mut()
                .and_then(|r| r.child.try_wait().ok().flatten())
            {
                self.fail(&format!(
                    "troupe exited with {status} before /healthz answered 200"
                ))
                .await;
            }
            // A poll interval, not a synchronisation: the deadline above bounds the loop.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Kills the child, collects what it printed, and panics with all of it.
    async fn fail(&mut self, why: &str) -> ! {
        let status = match self.running.take() {
            Some(mut r) => {
                let _ = r.child.start_kill();
                let status = match tokio::time::timeout(STOP_DEADLINE, r.child.wait()).await {
                    Ok(Ok(s)) => s.to_string(),
                    Ok(Err(e)) => format!("unknown ({e})"),
                    Err(_) => "still running after SIGKILL".into(),
                };
                for reader in r.readers {
                    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
                }
                status
            }
            None => "not running".into(),
        };
        self.logs_reported = true;
        panic!(
            "{why}\nbinary: {}\nexit: {status}\ndatabase: {}\n----- output -----\n{}",
            troupe_bin().display(),
            redact_url(&self.database.url),
            self.logs.text()
        );
    }

    /// Options for another process on this app's database, with the same personas, model
    /// and environment: a second replica. Add what differs (its bus, its role) with `env`.
    pub fn replica_options(&self) -> TestAppOptions {
        self.options.clone().database_url(&self.database.url)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The running binary's process id (for `/proc/<pid>/status`); `None` when stopped.
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().and_then(|r| r.child.id())
    }
    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn database_url(&self) -> &str {
        &self.database.url
    }
    pub fn backend(&self) -> Backend {
        self.options.backend
    }
    /// An HTTP client for requests the helpers don't cover (no proxy, with a deadline).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
    /// Everything the binary printed so far, over all its starts.
    pub fn logs(&self) -> String {
        self.logs.text()
    }

    /// The value of a fake's bounded wait, or a panic with the wait's diagnostic and
    /// everything the binary printed: what a failing end-to-end test needs to be read.
    pub fn expect<T>(&self, waited: Result<T, String>) -> T {
        waited.unwrap_or_else(|e| panic!("{e}\n----- troupe output -----\n{}", self.logs()))
    }

    /// Sends SIGTERM and waits for the child to exit; panics if it does not within the
    /// deadline (after killing it).
    pub async fn stop(&mut self) -> ExitStatus {
        let mut r = self.running.take().expect("stop: the app is not running");
        if let Some(pid) = r.child.id() {
            terminate(pid);
        }
        let status = match tokio::time::timeout(STOP_DEADLINE, r.child.wait()).await {
            Ok(Ok(s)) => s,
            other => {
                let _ = r.child.start_kill();
                let _ = r.child.wait().await;
                panic!(
                    "troupe did not exit within {STOP_DEADLINE:?} of SIGTERM ({other:?})\n----- output -----\n{}",
                    self.logs.text()
                );
            }
        };
        for reader in r.readers {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        self.logs
            .push(&format!("===== troupe-e2e: exited with {status} ====="));
        status
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self) {
        let mut r = self.running.take().expect("kill: the app is not running");
        let _ = r.child.start_kill();
        let _ = r.child.wait().await;
        for reader in r.readers {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        self.logs.push("===== troupe-e2e: killed =====");
    }

    /// Graceful stop, then a new start on the same data dir, database and environment. The
    /// port changes: use [`Self::url`] afresh.
    pub async fn restart(&mut self) {
        let status = self.stop().await;
        assert!(
            status.success(),
            "troupe exited with {status} on SIGTERM\n----- output -----\n{}",
            self.logs()
        );
        self.start().await;
    }

    /// Starts the app again after [`Self::kill`] or [`Self::stop`].
    pub async fn start_again(&mut self) {
        self.start().await;
    }

    async fn read(
        resp: Result<reqwest::Response, reqwest::Error>,
        what: &str,
    ) -> (StatusCode, Value) {
        let resp = resp.unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = resp.status();
        let text = resp
            .text()
            .await
            .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"));
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    /// The sources (document names) `GET /knowledge/search?q=` finds for `agent`, best
    /// first, at most `limit`; `q` is put in the URL as it is given (encode it).
    pub async fn search_sources(&self, agent: &str, q: &str, limit: usize) -> Vec<String> {
        let (status, found) = self
            .get(&format!(
                "/api/agents/{agent}/knowledge/search?q={q}&limit={limit}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{found}");
        found["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|r| r["source"].as_str().map(str::to_string))
            .collect()
    }

    /// `agent`'s documents' vectors as `GET …/documents` lists them: `(done, total)`
    /// summed over its documents (`(0, 0)` when search is keywords only).
    pub async fn vectors(&self, agent: &str) -> (i64, i64) {
        let (status, listed) = self.get(&format!("/api/agents/{agent}/documents")).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let docs = listed["documents"].as_array().expect("documents").clone();
        docs.iter().fold((0, 0), |(done, total), d| {
            let v = &d["vectors"];
            (
                done + v["done"].as_i64().unwrap_or(0),
                total + v["total"].as_i64().unwrap_or(0),
            )
        })
    }

    /// Waits (bounded by `timeout`) until every chunk of `agent`'s documents has its
    /// vector: uploads answer before their chunks are embedded, in the background.
    pub async fn wait_for_vectors(&self, agent: &str, timeout: Duration) {
        eventually(
            &format!("every chunk of {agent}'s documents to have its vector"),
            timeout,
            || async {
                let (done, total) = self.vectors(agent).await;
                total > 0 && done == total
            },
        )
        .await;
    }

    /// `GET path` with the configured API token if any; the body as JSON, or a JSON string
    /// holding the raw text when it is not JSON.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let token = self.options.api_token.clone();
        self.get_as(path, token.as_deref()).await
    }

    /// `GET path` with this bearer token, or none.
    pub async fn get_as(&self, path: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut req = self.client.get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, &format!("GET {path}")).await
    }

    /// `POST path` with a JSON body and an optional bearer token.
    pub async fn post_json(
        &self,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.post(self.url(path)).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, &format!("POST {path}")).await
    }

    /// `POST path` with a raw body (for malformed JSON).
    pub async fn post_raw(
        &self,
        path: &str,
        body: &str,
        content_type: &str,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .post(self.url(path))
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, &format!("POST {path}")).await
    }

    /// `POST /api/agents/{agent}/documents` of `parts` (see [`crate::multipart`]), with the
    /// configured API token if any.
    pub async fn upload(&self, agent: &str, parts: &[Part<'_>]) -> (StatusCode, Value) {
        let path = format!("/api/agents/{agent}/documents");
        let mut req = multipart::attach(self.client.post(self.url(&path)), parts);
        if let Some(t) = &self.options.api_token {
            req = req.bearer_auth(t);
        }
        Self::read(req.send().await, &format!("POST {path}")).await
    }

    /// `POST /api/agents/{agent}/messages`, with the configured API token if any.
    pub async fn post_message(&self, agent: &str, body: &Value) -> (StatusCode, Value) {
        let token = self.options.api_token.clone();
        self.post_json(
            &format!("/api/agents/{agent}/messages"),
            body,
            token.as_deref(),
        )
        .await
    }
}

impl Drop for TestApp {
    /// Kills the child. On a failing test, prints everything it logged (the test harness
    /// shows it under the failure) and keeps a Postgres database for inspection; otherwise
    /// drops that database.
    fn drop(&mut self) {
        if let Some(r) = self.running.as_mut() {
            let _ = r.child.start_kill();
        }
        if std::thread::panicking() {
            if self.logs_reported {
                return;
            }
            eprintln!(
                "----- troupe output (data dir {}, database {}) -----\n{}",
                self.dir.path().display(),
                redact_url(&self.database.url),
                self.logs.text()
            );
            return;
        }
        if self.options.backend == Backend::Postgres {
            let url = self.database.url.clone();
            // Drop runs inside the test's runtime: use a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let Ok(rt) = rt {
                    rt.block_on(drop_postgres_database(&url));
                }
            })
            .join();
        }
    }
}

/// Best effort: `DROP DATABASE … WITH (FORCE)` through `TROUPE_TEST_DATABASE_URL`.
async fn drop_postgres_database(url: &str) {
    use sqlx::Connection;
    let Some(base) = crate::env::postgres_url_if_set() else {
        return;
    };
    let Some(name) = reqwest::Url::parse(url)
        .ok()
        .map(|u| u.path().trim_start_matches('/').to_string())
    else {
        return;
    };
    if !name.starts_with("troupe_e2e_") {
        return;
    }
    if let Ok(mut conn) = sqlx::PgConnection::connect(&base).await {
        let sql = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
    }
}

#[cfg(unix)]
fn terminate(pid: u32) {
    // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped) and a valid signal.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

#[cfg(not(unix))]
fn terminate(_pid: u32) {
    // No SIGTERM: the stop deadline kills it.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_listening_address() {
        let line =
            "2026-01-01T00:00:00Z  INFO troupe: listening on http://127.0.0.1:41234 (api, metrics)";
        assert_eq!(
            parse_listening(line),
            Some("127.0.0.1:41234".parse().unwrap())
        );
        let colored =
            strip_ansi("\u{1b}[32m INFO\u{1b}[0m listening on http://127.0.0.1:5000\u{1b}[0m");
        assert_eq!(
            parse_listening(&colored),
            Some("127.0.0.1:5000".parse().unwrap())
        );
        assert_eq!(
            parse_listening("listening on http://[::1]:80/"),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(parse_listening("starting"), None);
    }

    #[test]
    fn json_search_looks_in_nested_strings() {
        let v = json!({"memories": [{"text": "the number 4242", "n": 1}]});
        assert!(json_contains_text(&v, "4242"));
        assert!(!json_contains_text(&v, "memories"));
    }

    #[test]
    fn persona_is_an_eliza_v0_character() {
        let p = persona_json("Ada", "Ada keeps a lighthouse.");
        assert_eq!(p["modelProvider"], "openai");
        for key in [
            "name",
            "bio",
            "lore",
            "messageExamples",
            "postExamples",
            "topics",
            "adjectives",
            "style",
            "clients",
            "plugins",
        ] {
            assert!(p.get(key).is_some(), "{key}");
        }
    }
}
