//! The Web connector: the HTTP API and `troupe chat` seen as one more platform.
//!
//! Its receiving side is `POST /api/agents/{agent}/messages`, which waits for the agent's
//! outcome directly, so delivering through the outbox has nothing left to do: the reply is
//! recorded delivered in the transaction that records it (`delivered_in_band`), `send`
//! acknowledges a retried entry, and the reply stays readable in the room's memory.

use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use troupe_connectors::{
    Connector, ConnectorError, Delivery, InboundSink, MessageId, Outbound, Platform,
};

/// The `userId` of an API message that names none. Every such caller shares it, so memory
/// learns no facts about it (they would follow one caller into another's rooms).
pub const ANONYMOUS_USER: &str = "api-user";

/// The namespace of the OpenAI-compatible API's stateless rooms, one per end user
/// (`openai:USER`; a scoped token's `NAME:openai:USER`). No room a caller names may be in
/// it, and no scoped token may be named so (issue 43).
pub const STATELESS_NAMESPACE: &str = "openai";

pub struct WebConnector;

#[async_trait]
impl Connector for WebConnector {
    fn platform(&self) -> Platform {
        Platform::Web
    }

    async fn run(
        &self,
        _sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        Ok(in_band(reply))
    }

    fn delivered_in_band(&self, reply: &Outbound) -> Option<Delivery> {
        Some(in_band(reply))
    }
}

/// A Web reply's one message id is its outbox key.
fn in_band(reply: &Outbound) -> Delivery {
    Delivery {
        message_ids: vec![MessageId::new(reply.key.clone())],
    }
}
