//! troupe-connectors: the normalized message model, and one module per platform.
//!
//! Layout:
//! - [`model`]: `Platform`, the id newtypes, `RoomRef`, `UserRef`, `Inbound`, `Outbound`,
//!   `Attachment`. Everything a connector emits or accepts, and nothing platform-specific.
//! - [`connector`]: the `Connector` trait (a source and a sink for one platform account) and
//!   the `InboundSink` it hands messages to, plus the typed `ConnectorError`.
//! - [`registry`]: builds the connector for a platform from its settings.
//! - [`split`]: splitting a long reply at a platform's length limit on natural boundaries.
//! - `discord` (feature `discord`, on by default): Discord bots over the gateway WebSocket
//!   (serenity) and the REST API, with catch-up after downtime and code-fence-aware splitting.
//! - `farcaster` (feature `farcaster`, on by default): Farcaster over Neynar's v2 API,
//!   polling notifications or taking signed webhooks, posting replies as chained casts.
//! - [`telegram`] (feature `telegram`, on by default): the Telegram Bot API connector.
//! - `fuzzing` (feature `fuzzing`, hidden): byte-level entry points for the fuzz targets in
//!   `fuzz/`; not an API.
//!
//! A connector depends on nothing in the gateway: it receives an `InboundSink` and a
//! shutdown token, and it never learns who consumes its messages.

pub mod connector;
#[cfg(feature = "discord")]
pub mod discord;
#[cfg(feature = "farcaster")]
pub mod farcaster;
#[cfg(all(feature = "discord", feature = "farcaster", feature = "telegram"))]
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod registry;
pub mod split;
#[cfg(feature = "telegram")]
pub mod telegram;

pub use connector::{
    Accepted, Connector, ConnectorError, ConnectorState, ContextLine, Delivery, InboundSink,
    MemoryState, SinkError, WebhookRequest, WebhookResponse,
};
pub use model::{
    AgentId, Attachment, BadRoomKey, Inbound, MessageId, Outbound, Platform, ReplyTo, RoomId,
    RoomKey, RoomRef, UserId, UserRef,
};
pub use registry::{Built, ConnectorSettings, Lookup};
