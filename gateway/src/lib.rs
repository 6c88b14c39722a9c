//! troupe: the gateway runtime.
//!
//! Follow a message through three files: it enters in [`ingress`] (journal, then bus), it is
//! decided and answered in [`agent`], and it leaves through [`outbox`].
//!
//! Layout:
//! - [`config`]: the only reader of the environment; `Config` with typed secrets.
//! - [`cli`]: `troupe run | check | migrate | chat | ingest | bench`.
//! - [`app`]: the topology; builds and runs everything as one value.
//! - [`ingress`]: journal-then-publish, and direct conversations.
//! - [`outcome`]: how handling a message ended (`Outcome`, `HandleError`), and the callers
//!   waiting to hear it (`Waiters`); below `ingress`, `bus` and `agent`.
//! - [`bus`]: delivery of journaled messages to agents, ordered per room.
//! - [`access`]: who may talk to a persona: DM policies, pairing codes, owners, groups.
//! - `pairing`: pairing codes and their limits, below `access` and `storage`.
//! - [`agent`]: decide, rate-limit, recall, prompt, call the model, record, reply.
//! - [`rooms`]: chat commands, room controls (mute, follow, forget) and reply actions.
//! - [`outbox`]: delivery through the connectors, with retries.
//! - [`registry`]: the running connectors, by persona and platform; filled in by `app`.
//! - `connect`: connecting a platform from the console: where each token comes from, next
//!   steps, and restarting a persona's connectors with a new one.
//! - `secrets_file`: platform credentials stored from the console, outside character files.
//! - `shared_bots`: bots several personas share, each speaking as itself (Discord webhooks,
//!   a Telegram name prefix).
//! - `memory`: room summaries and user facts, kept up in the background.
//! - [`people`]: one person across platforms: linked accounts, `/link`, `person_of`.
//! - [`persona`]: elizaOS character files: loading, checking, prompt composition.
//! - [`posts`]: autonomous posts on a schedule, claimed once across replicas.
//! - [`provider`]: model providers (OpenAI-compatible, Anthropic, Ollama) over genai.
//! - [`spend`]: token and cost accounting, budgets, and the fair model scheduler.
//! - [`storage`]: SQLite and Postgres through sqlx: journal, memory, outbox.
//! - [`knowledge`]: documents per agent or room: extraction, chunking, BM25 and vector
//!   retrieval for the prompt.
//! - [`media`]: images in messages: their limits, their type, fetching them by reference when
//!   a message is handled, the model's image parts, memory.
//! - `feedback`: 👍/👎 on a persona's reply, recorded as feedback (issue 32).
//! - [`live`]: a reply's text while the model writes it, for those who show it live.
//! - [`fetch`]: every fetch of a URL a stranger chose (attachments, embeds): the SSRF policy.
//! - [`limits`]: inbound rate limits, and the HTTP API's budget per caller.
//! - `lifecycle`: what runs beside the app's work (housekeeping, giving memory back) and its
//!   drain at shutdown.
//! - [`leader`]: which replica runs a receiver its platform allows once (Postgres locks).
//! - `supervise`: connectors' receive loops kept running after a panic, and their state.
//! - [`metrics`]: the Prometheus series behind `GET /metrics`.
//! - [`http`]: the HTTP API.
//! - [`web`]: the HTTP API seen as a connector.
//! - [`turns`]: the turns in flight a delete of their message cancels (issue 32).
//! - `tools`: MCP servers' tools for personas, with the operator's and the rooms' policy.
//! - `why`: what went into a recent reply's prompt, for the console's "why" panel.
//! - `fuzzing` (feature `fuzzing`, hidden): byte-level entry points for the fuzz targets in
//!   `fuzz/`; not an API.

pub(crate) mod access;
pub(crate) mod agent;
pub(crate) mod app;
pub(crate) mod bench;
pub(crate) mod bus;
pub(crate) mod chat;
pub mod cli;
mod clock;
pub(crate) mod config;
pub(crate) mod connect;
pub(crate) mod drafts;
pub(crate) mod feedback;
pub(crate) mod fetch;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod http;
pub(crate) mod ingress;
pub mod knowledge;
pub(crate) mod leader;
mod lifecycle;
pub(crate) mod limits;
pub(crate) mod live;
pub(crate) mod media;
mod memory;
pub(crate) mod metrics;
pub(crate) mod models;
pub(crate) mod outbox;
pub(crate) mod outcome;
pub(crate) mod pairing;
pub mod people;
pub(crate) mod persona;
pub(crate) mod posts;
pub(crate) mod provider;
pub(crate) mod registry;
pub(crate) mod rooms;
pub(crate) mod secrets_file;
mod shared_bots;
pub(crate) mod spend;
pub mod storage;
mod supervise;
mod telemetry;
pub(crate) mod tools;
pub(crate) mod trace;
pub(crate) mod turns;
pub(crate) mod web;
mod why;
