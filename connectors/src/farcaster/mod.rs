//! The Farcaster connector, over Neynar's v2 API: one persona's Farcaster account (its FID
//! and a Neynar managed signer) as a source of `Inbound` and a sink for `Outbound`.
//!
//! It owns everything Neynar-shaped: the settings (`config`), the HTTP client with its
//! per-endpoint pacing (`api`), the JSON types (`wire`), cast normalization (`normalize`),
//! the notification poll and its high-water mark (`poll`), webhook verification
//! (`webhook`) and posting replies as chained casts (`publish`). It knows nothing of the
//! gateway beyond the `Connector` trait.
//!
//! The room is the cast thread (its root hash), and the thread belongs to whoever cast its
//! root: only they steer it (`owner`). Troupe remembers only the casts it
//! received, so before answering a reply the gateway asks `thread_context` for the casts
//! above it (`context`, from Neynar's conversation endpoint), and the prompt shows them
//! before the room's memory.
//!
//! Casts arrive either by polling the account's mention and reply notifications
//! (the default) or by Neynar webhooks (`cast.created`), when a webhook secret is set.

mod api;
mod check;
mod config;
mod context;
mod normalize;
mod owner;
mod poll;
mod publish;
mod webhook;
mod wire;

/// The normalizer and readers, for `crate::fuzzing` (the fuzz targets and their corpus
/// replay) only.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    pub(crate) use super::config::Fid;
    pub(crate) use super::normalize::{Hint, to_inbound};
    pub(crate) use super::poll::sift;
    pub(crate) use super::webhook::{Event, decode};
    pub(crate) use super::wire::{Cast, NotificationsPage};
}

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::connector::{
    Accepted, Built, Connector, ConnectorError, ConnectorSettings, ConnectorState, ContextLine,
    Delivery, InboundSink, Lookup, Receiving, WebhookRequest, WebhookResponse,
};
use crate::model::{AgentId, Inbound, Outbound, Platform};

use api::Neynar;
use config::{Intake, Parsed, Settings};
use publish::Authors;

pub use check::check_account;

/// Builds the Farcaster connector from elizaOS's settings (see `docs/farcaster.md`).
pub fn build(lookup: Lookup<'_>, settings: &ConnectorSettings) -> Result<Built, ConnectorError> {
    let parsed = match config::parse(lookup)? {
        Parsed::Ready(s) => s,
        Parsed::NotConfigured(why) => return Ok(Built::NotConfigured(why)),
    };
    let connector =
        FarcasterConnector::new(parsed, settings.state.clone(), settings.agent_id.clone())?;
    Ok(Built::Ready(Arc::new(connector)))
}

/// One Farcaster account.
pub struct FarcasterConnector {
    settings: Settings,
    api: Neynar,
    state: Arc<dyn ConnectorState>,
    authors: Authors,
    /// The persona served: names the webhook route in the start-up log line.
    agent_id: AgentId,
    /// The sink `run` was given; webhooks hand their casts to it.
    sink: watch::Sender<Option<Arc<dyn InboundSink>>>,
}

/// How long a webhook that arrives while the connector is starting waits for `run`.
const SINK_WAIT: Duration = Duration::from_secs(10);

impl FarcasterConnector {
    fn new(
        settings: Settings,
        state: Arc<dyn ConnectorState>,
        agent_id: AgentId,
    ) -> Result<Self, ConnectorError> {
        Ok(Self {
            api: Neynar::new(&settings)?,
            settings,
            state,
            authors: Authors::default(),
            agent_id,
            sink: watch::Sender::new(None),
        })
    }

    /// The sink of the running connector, waiting a little if `run` has not started yet.
    async fn running_sink(&self) -> Option<Arc<dyn InboundSink>> {
        let mut rx = self.sink.subscribe();
        let ready = tokio::time::timeout(SINK_WAIT, rx.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(sink)) => sink.clone(),
            _ => None,
        }
    }

    async fn poll_loop(
        &self,
        sink: &dyn InboundSink,
        every: std::time::Duration,
        shutdown: &CancellationToken,
    ) -> Result<(), ConnectorError> {
        tracing::info!(fid = %self.settings.fid, every_secs = every.as_secs(),
            dry_run = self.settings.dry_run, "polling Farcaster mentions and replies");
        loop {
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                r = poll::poll_once(&self.api, &*self.state, sink, self.settings.fid, &self.authors) => r,
            };
            match outcome {
                Ok(report) if report.new > 0 || report.duplicates > 0 => {
                    tracing::info!(
                        new = report.new,
                        already_seen = report.duplicates,
                        pages = report.pages,
                        "Farcaster casts received"
                    );
                }
                Ok(_) => {}
                Err(ConnectorError::Unauthorized(why)) => {
                    return Err(ConnectorError::Unauthorized(format!(
                        "{why} (check FARCASTER_NEYNAR_API_KEY)"
                    )));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "polling Farcaster failed; trying again at the next interval")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(every) => {}
            }
        }
    }
}

fn json_response(status: u16, body: serde_json::Value) -> WebhookResponse {
    WebhookResponse {
        status,
        body: body.to_string(),
    }
}

#[async_trait]
impl Connector for FarcasterConnector {
    fn platform(&self) -> Platform {
        Platform::Farcaster
    }

    async fn run(
        &self,
        sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        self.sink.send_replace(Some(sink.clone()));
        let result = match &self.settings.intake {
            Intake::Poll(every) => self.poll_loop(&*sink, *every, &shutdown).await,
            Intake::Webhook(_) => {
                tracing::info!(fid = %self.settings.fid, dry_run = self.settings.dry_run,
                    path = %format!("/webhooks/farcaster/{}", self.agent_id),
                    "taking Farcaster casts from Neynar webhooks");
                shutdown.cancelled().await;
                Ok(())
            }
        };
        self.sink.send_replace(None);
        result
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        let parts = publish::chunks(&reply.text, self.settings.cast_limit);
        if parts.is_empty() {
            return Ok(Delivery::default());
        }
        if self.settings.dry_run {
            tracing::info!(room = %reply.room.id, reply_to = ?reply.reply_to.as_ref().map(|m| m.as_str()),
                bytes = reply.text.len(), casts = parts.len(),
                "FARCASTER_DRY_RUN: not posting the reply");
            return Ok(Delivery::default());
        }
        let Some(signer) = &self.settings.signer_uuid else {
            return Err(ConnectorError::Fatal(
                "FARCASTER_NEYNAR_SIGNER_UUID is not set: cannot post".into(),
            ));
        };
        publish::send(
            &self.api,
            &self.authors,
            signer,
            self.settings.fid,
            self.settings.cast_limit,
            reply,
        )
        .await
    }

    async fn webhook(&self, request: WebhookRequest) -> WebhookResponse {
        let Intake::Webhook(secret) = &self.settings.intake else {
            return json_response(
                404,
                serde_json::json!({"error": "not_found",
                    "detail": "this persona polls Farcaster; set FARCASTER_NEYNAR_WEBHOOK_SECRET to take webhooks"}),
            );
        };
        let signed = request
            .header(webhook::SIGNATURE_HEADER)
            .is_some_and(|sig| webhook::verify(secret, &request.body, sig));
        if !signed {
            tracing::warn!(
                "refused a Farcaster webhook with a missing or wrong X-Neynar-Signature"
            );
            return json_response(
                401,
                serde_json::json!({"error": "unauthorized", "detail": "missing or invalid X-Neynar-Signature"}),
            );
        }
        let cast = match webhook::decode(&request.body, self.settings.fid) {
            Ok(webhook::Event::ForUs(cast)) => cast,
            Ok(webhook::Event::Ignored(why)) => {
                tracing::debug!(reason = why, "Farcaster webhook ignored");
                return json_response(200, serde_json::json!({"ok": true, "ignored": why}));
            }
            Err(detail) => {
                return json_response(
                    400,
                    serde_json::json!({"error": "bad_request", "detail": detail}),
                );
            }
        };
        self.authors.remember(&cast.hash, cast.author.fid);
        let hint = normalize::Hint::default();
        let inbound = match normalize::to_inbound(&cast, self.settings.fid, hint) {
            Ok(Some(inbound)) => inbound,
            Ok(None) => {
                return json_response(
                    200,
                    serde_json::json!({"ok": true, "ignored": "the bot's own cast"}),
                );
            }
            Err(e) => {
                return json_response(
                    400,
                    serde_json::json!({"error": "bad_request", "detail": e.to_string()}),
                );
            }
        };
        let Some(sink) = self.running_sink().await else {
            return json_response(
                503,
                serde_json::json!({"error": "unavailable", "detail": "the Farcaster connector is not running yet"}),
            );
        };
        match sink.accept(inbound).await {
            Ok(accepted) => json_response(
                200,
                serde_json::json!({"ok": true, "accepted": match accepted {
                    Accepted::New => "new",
                    Accepted::Duplicate => "duplicate",
                }}),
            ),
            // Neynar would retry a 5xx; this cast will never be taken, so it is answered as
            // handled, like Telegram's webhook.
            Err(e) if !e.is_retryable() => {
                tracing::warn!(error = %e, "the gateway refused a Farcaster webhook cast; skipping it");
                json_response(200, serde_json::json!({"ok": true, "skipped": true}))
            }
            Err(e) => {
                tracing::error!(error = %e, "could not journal a Farcaster webhook cast");
                json_response(
                    503,
                    serde_json::json!({"error": "unavailable", "detail": "could not store the cast; retry"}),
                )
            }
        }
    }

    async fn thread_context(&self, message: &Inbound) -> Vec<ContextLine> {
        // A root cast has nothing above it: no call.
        if message.platform() != Platform::Farcaster || message.reply_to.is_none() {
            return Vec::new();
        }
        match self.api.parent_casts(message.id.as_str()).await {
            Ok(parents) => context::lines(parents, self.settings.fid),
            Err(e) => {
                tracing::warn!(cast = %message.id, error = %e,
                    "could not fetch the cast's thread; answering without it");
                Vec::new()
            }
        }
    }

    /// The thread's root author alone steers it (`owner`).
    async fn may_steer(&self, message: &Inbound) -> Result<bool, ConnectorError> {
        owner::may_steer(&self.api, &self.authors, self.settings.fid, message).await
    }

    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        self.api.user(self.settings.fid).await
    }
    /// Neynar pushes each webhook event once; polling the notifications is for one replica
    /// per account, named by its FID (public).
    fn receiving(&self) -> Receiving {
        match self.settings.intake {
            Intake::Webhook(_) => Receiving::Everywhere,
            Intake::Poll(_) => Receiving::OneAtATime {
                name: format!("farcaster:{}", self.settings.fid),
            },
        }
    }
}
