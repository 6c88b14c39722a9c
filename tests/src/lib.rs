//! troupe-e2e: faithful fakes of the services troupe talks to, and a harness that runs the
//! real `troupe` binary against them. Tests talk to the gateway only through HTTP and the
//! fakes, never through its crates.
//!
//! Layout:
//! - [`fake_openai`]: the OpenAI-compatible API (chat completions, streaming, embeddings,
//!   models) with scripted replies and a record of every request.
//! - [`fake_discord`]: Discord's REST routes and gateway WebSocket (identify, resume and
//!   replay, drops), recording what the bot sent, with scripted 429s.
//! - [`fake_neynar`]: Neynar's Farcaster API (notifications, casts, publishing with `idem`)
//!   with scripted failures per route, and signed `cast.created` webhooks.
//! - [`fake_hub`]: the Hugging Face Hub's metadata and resolve routes (ranges, LFS
//!   headers) serving one model directory, with a cut connection, a corrupt file or a token.
//! - [`fake_telegram`]: the Telegram Bot API (getUpdates long polling with offsets,
//!   webhooks, sendMessage, leaveChat, files) with scripted 429s and a record of every call.
//! - [`app`]: [`TestApp`], the `troupe run` child process on a fresh data dir and a fresh
//!   SQLite file or Postgres database, with port discovery, restart and log capture.
//! - [`browser`]: headless Chromium over WebDriver, for the console's browser tests.
//! - [`gauges`]: the gateway's decision counters to wait on, and `troupe pairing`.
//! - [`persona_json`]: a minimal valid elizaOS v0 character file.
//! - [`mcp`]: the real MCP server of the tool tests (Python SDK) and the Python to run it.
//! - [`multipart`]: hand-built document uploads, the fields in the order a test gives.
//! - [`recorder`]: an endpoint that only records what reached it (method, path,
//!   `Authorization`), standing for an attacker's server.
//! - [`services`]: private Postgres and NATS servers that a fault test may restart.
//! - [`streams`]: what the streaming tests share on every platform (a long answer, the
//!   reply read as one text, the edit pace).
//! - [`env`]: the services tests run against, from the environment (`TROUPE_TEST_*`), and
//!   the rule that a missing one skips a test here and fails it in CI.
//! - [`wait`]: how every fake is waited on (wake on each change, bounded by a deadline) and
//!   what it reports when a wait times out ([`wait::Diagnose`]).

pub mod app;
pub mod browser;
pub mod env;
pub mod fake_discord;
pub mod fake_hub;
pub mod fake_neynar;
pub mod fake_openai;
pub mod fake_telegram;
pub mod gauges;
pub mod mcp;
pub mod multipart;
pub mod recorder;
pub mod services;
pub mod streams;
pub mod wait;

pub use app::{
    Backend, TestApp, TestAppOptions, eventually, json_contains_text, persona_json, troupe_bin,
    try_post_message,
};
pub use fake_openai::{
    ChatMessage, ChatRequestRecord, FakeOpenAi, FakeOpenAiConfig, Gate, Outcome, Script,
};
pub use services::{PrivateNats, PrivatePostgres};
pub use wait::{Diagnose, WAIT};

/// An HTTP client builder for tests and fakes. reqwest is built without a TLS provider of
/// its own (troupe installs ring for the whole process, `troupe_connectors::tls`), so the
/// test process installs ring too before its first client.
pub fn http_client() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Installs ring as the test process's rustls provider, once (genai builds reqwest clients
/// of its own).
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The elizaOS character fixtures: `TROUPE_FIXTURES_DIR`, or `shared/fixtures/characters`
/// beside the repository. `None` (with a note) outside CI when they are absent; in CI their
/// absence fails the test.
pub fn fixtures_dir() -> Option<std::path::PathBuf> {
    let candidates = [
        std::env::var("TROUPE_FIXTURES_DIR")
            .ok()
            .map(std::path::PathBuf::from),
        Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/fixtures/characters"),
        ),
    ];
    if let Some(dir) = candidates.into_iter().flatten().find(|d| d.is_dir()) {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("the elizaOS fixtures are missing: set TROUPE_FIXTURES_DIR");
    }
    eprintln!(
        "skipping: the elizaOS fixtures are not beside the repository (set TROUPE_FIXTURES_DIR)"
    );
    None
}

/// Runs each named `async fn(Backend)` as `<name>::sqlite` and `<name>::postgres`; the
/// Postgres one skips outside CI without `TROUPE_TEST_DATABASE_URL`, and fails in CI.
#[macro_export]
macro_rules! on_each_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::Backend::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                let test = concat!(stringify!($name), "::postgres");
                if let Some(backend) = $crate::Backend::Postgres.or_skip(test) {
                    super::$name(backend).await;
                }
            }
        }
    )*};
}
