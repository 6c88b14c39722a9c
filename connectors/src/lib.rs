//! troupe-connectors: the normalized message model, and one module per platform.
//!
//! Layout:
//! - [`model`]: `Platform`, the id newtypes, `RoomRef`, `UserRef`, `Inbound`, `Outbound`,
//!   `Attachment`. Everything a connector emits or accepts, and nothing platform-specific.
//! - `chorus` (Discord, Telegram): several personas on one bot account: one connection
//!   hands each message to all of them, each told what concerns it, and each answers
//!   through its own connector, as itself.
//! - [`command`]: chat commands (`/mute 10m`, `/help@bot`) parsed into one closed `Command`,
//!   and the list every platform registers.
//! - [`connector`]: the `Connector` trait (a source and a sink for one platform account) and
//!   the `InboundSink` it hands messages to, plus the typed `ConnectorError`, and what a
//!   platform is built from (`ConnectorSettings`, `Lookup`) and answers (`Built`,
//!   `Receiving`, `Shard`), and what checking a token tells (`Account`, `CheckError`).
//! - [`registry`]: builds the connector for a platform from its settings: one match arm per
//!   platform. It imports the platform modules; they import only `connector`, `model`,
//!   `split`, `shown`, `chorus`, `ogg` and `multipart`, so one platform is one module.
//! - [`files`]: a message's platform files (photos, voice notes) as references, fetched
//!   by the connector that received them, with its own client; `FileError`.
//! - [`multipart`]: `multipart/form-data` bodies for audio uploads, with a boundary checked
//!   against the bytes.
//! - [`ogg`]: an Ogg stream's page headers (a voice note's length, its packets over time),
//!   read without decoding the audio.
//! - `shown`: the ids of a reply's messages shown while it was written (Discord, Telegram),
//!   kept in the connector's state so a restart finishes them instead of posting again.
//! - [`split`]: splitting a long reply at a platform's length limit on natural boundaries.
//! - `discord` (feature `discord`, on by default): Discord bots over the gateway WebSocket
//!   (serenity) and the REST API, with catch-up after downtime and code-fence-aware splitting.
//! - `farcaster` (feature `farcaster`, on by default): Farcaster over Neynar's v2 API,
//!   polling notifications or taking signed webhooks, posting replies as chained casts.
//! - [`telegram`] (feature `telegram`, on by default): the Telegram Bot API connector.
//! - [`sync`]: lock-poison recovery (`locked()`, `read_locked()`, `write_locked()`), one
//!   rule for every `std::sync` lock in both crates.
//! - [`tls`]: the one TLS crypto provider (ring), and the builder every HTTP client comes
//!   from.
//! - `conformance` (tests only): one test body that every connector runs against its fake
//!   platform: messages come out normalized, shutdown is respected, send errors surface.
//! - `fuzzing` (feature `fuzzing`, hidden): byte-level entry points for the fuzz targets in
//!   `fuzz/`; not an API.
//!
//! A connector depends on nothing in the gateway: it receives an `InboundSink` and a
//! shutdown token, and it never learns who consumes its messages.

// The conformance suite: every connector against its fake platform (tests only).
pub mod accounts;
#[cfg(any(feature = "discord", feature = "telegram"))]
pub mod chorus;
pub mod command;
#[cfg(all(test, feature = "discord", feature = "farcaster", feature = "telegram"))]
mod conformance;
pub mod connector;
#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "farcaster")]
pub mod farcaster;
pub mod files;
#[cfg(all(feature = "discord", feature = "farcaster", feature = "telegram"))]
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod multipart;
pub mod ogg;
pub mod registry;
#[cfg(any(feature = "discord", feature = "telegram"))]
mod shown;
pub mod split;
pub mod sync;
#[cfg(feature = "telegram")]
pub mod telegram;
pub mod tls;

pub use connector::{
    Accepted, Account, AccountFacts, Built, CheckError, Connector, ConnectorError,
    ConnectorSettings, ConnectorState, ContextLine, Delivery, InboundSink, Lookup, MemoryState,
    Receiving, SELF_ID_KEY, Shard, SinkError, VoiceNote, WebhookRequest, WebhookResponse,
    panic_message,
};
pub use model::{
    AgentId, Attachment, BadRoomKey, Change, ClientContext, ClientTurn, Inbound, MessageId,
    Outbound, Platform, Reaction, ReplyTo, Revision, RoomId, RoomKey, RoomRef, TurnSpeaker, UserId,
    UserRef,
};
