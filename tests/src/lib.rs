//! troupe-e2e: faithful fakes of the services troupe talks to, and a harness that runs the
//! real `troupe` binary against them. Tests talk to the gateway only through HTTP and the
//! fakes, never through its crates.
//!
//! Layout:
//! - [`fake_openai`]: the OpenAI-compatible API (chat completions, streaming, embeddings,
//!   models) with scripted replies and a record of every request.
//! - [`fake_telegram`]: the Telegram Bot API (getUpdates long polling with offsets,
//!   webhooks, sendMessage, leaveChat, files) with scripted 429s and a record of every call.
//! - [`app`]: [`TestApp`], the `troupe run` child process on a fresh data dir and a fresh
//!   SQLite file or Postgres database, with port discovery, restart and log capture.
//! - [`persona_json`]: a minimal valid elizaOS v0 character file.

pub mod app;
pub mod fake_openai;
pub mod fake_telegram;

pub use app::{Backend, TestApp, TestAppOptions, eventually, json_contains_text, persona_json};
pub use fake_openai::{
    ChatMessage, ChatRequestRecord, FakeOpenAi, FakeOpenAiConfig, Outcome, Script,
};
