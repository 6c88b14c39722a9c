//! Bots that several personas share (issue 46, docs/discord.md and docs/telegram.md "A
//! troupe on one bot"): personas that set `settings.troupe.discord.speakAs: "webhook"` (or
//! `settings.troupe.telegram.speakAs: "prefix"`) and name the same token get one bot, one
//! connection (a gateway session, a `getUpdates` poller), and each its own voice: through
//! the channels' webhooks on Discord, its name in front on Telegram.
//!
//! This module keeps which bots run and which personas are on each: a persona joins when
//! its connectors start and leaves when they stop; the last to leave stops the bot's
//! connection. It also keeps the Discord webhooks in the database for the connector
//! (`discord_webhooks`, migration 0017). Who answers a message is the agents' and the
//! arbiter's; how a message is posted is the connector's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use troupe_connectors::chorus::{SharedBot, Voice};
use troupe_connectors::discord::{self, Hook, WebhookStore, WebhookToken};
use troupe_connectors::sync::Locked;
use troupe_connectors::{
    AgentId, Connector, ConnectorError, ConnectorState, InboundSink, Lookup, Platform, SinkError,
    telegram,
};

use crate::persona::Persona;
use crate::storage::{Store, StoredWebhook};

/// One shared bot that runs, and what stops its connection.
#[derive(Clone)]
struct Running {
    bot: SharedBot,
    stop: CancellationToken,
}

/// A bot that has just started: its connection is for the caller to run, under `stop`.
pub(crate) struct Started {
    pub bot: SharedBot,
    pub stop: CancellationToken,
}

/// The shared bots that run, by account. A cheap-to-clone handle.
#[derive(Clone, Default)]
pub(crate) struct SharedBots {
    running: Arc<Mutex<HashMap<String, Running>>>,
}

impl SharedBots {
    /// Puts `persona` on the `platform` bot its settings name, starting the bot when it is
    /// the first: the connector the persona answers through, and the bot to run when it
    /// just started. `None` (logged) when the persona has no token there or it is wrong.
    pub(crate) fn join(
        &self,
        persona: &Persona,
        platform: Platform,
        lookup: Lookup<'_>,
        (store, parent): (&Store, &CancellationToken),
        sink: Arc<dyn InboundSink>,
    ) -> Option<(Arc<dyn Connector>, Option<Started>)> {
        let account = match platform {
            Platform::Telegram => telegram::account_of(lookup),
            _ => discord::account_of(lookup),
        };
        let Some(account) = account else {
            tracing::warn!(persona = %persona.id, %platform, "not connecting: set the bot token (see docs/{platform}.md)");
            return None;
        };
        let mut running = self.running.locked();
        let mut started = None;
        let bot = match running.get(&account) {
            Some(r) => r.bot.clone(),
            None => {
                let bot = match build(platform, &account, lookup, store) {
                    Ok(Some(bot)) => bot,
                    Ok(None) => return None,
                    Err(e) => {
                        tracing::error!(persona = %persona.id, %platform, error = %e, "cannot build the shared bot");
                        return None;
                    }
                };
                let stop = parent.child_token();
                announce(platform, &account);
                running.insert(
                    account.clone(),
                    Running {
                        bot: bot.clone(),
                        stop: stop.clone(),
                    },
                );
                started = Some(Started {
                    bot: bot.clone(),
                    stop,
                });
                bot
            }
        };
        drop(running);
        let voice = Voice::new(
            AgentId::from(persona.id.as_str()),
            &persona.name,
            persona.avatar(),
        );
        Some((bot.join(voice, sink), started))
    }

    /// Takes `agent` off every shared bot; a bot left with nobody stops.
    pub(crate) fn leave(&self, agent: &AgentId) {
        let mut running = self.running.locked();
        running.retain(|account, r| {
            if r.bot.leave(agent) != Some(0) {
                return true;
            }
            tracing::info!(%account, "no persona is left on this shared bot; stopping it");
            r.stop.cancel();
            false
        });
    }
}

/// Builds the shared bot of `account` on `platform`; `None` without a token.
fn build(
    platform: Platform,
    account: &str,
    lookup: Lookup<'_>,
    store: &Store,
) -> Result<Option<SharedBot>, ConnectorError> {
    let state: Arc<dyn ConnectorState> = Arc::new(crate::storage::StoredState {
        store: store.clone(),
        agent_id: account_agent(account),
        platform,
    });
    match platform {
        Platform::Telegram => telegram::build_shared(lookup, state),
        _ => {
            let hooks = Arc::new(StoredHooks {
                store: store.clone(),
                account: account.to_string(),
            });
            discord::build_shared(lookup, state, hooks)
        }
    }
}

/// Logs once that personas share the bot of `account`, and how they tell themselves apart.
fn announce(platform: Platform, account: &str) {
    match platform {
        Platform::Telegram => {
            tracing::info!(%account, "personas share this Telegram bot and speak with their names in front")
        }
        _ => {
            tracing::info!(%account, "personas share this Discord bot and speak through channel webhooks")
        }
    }
}

/// The connector state of a shared bot: its own, not one persona's (its channels seen, its
/// user id, the reply markers of `discord::hooks`).
fn account_agent(account: &str) -> AgentId {
    AgentId::new(format!("~{account}"))
}

/// The webhooks of one bot account, in `discord_webhooks`.
struct StoredHooks {
    store: Store,
    account: String,
}

fn unavailable(e: impl std::fmt::Display) -> SinkError {
    SinkError::Unavailable(e.to_string())
}

#[async_trait::async_trait]
impl WebhookStore for StoredHooks {
    async fn get(&self, channel: u64) -> Result<Option<Hook>, SinkError> {
        let stored = self
            .store
            .webhook_get(&self.account, &channel.to_string())
            .await
            .map_err(unavailable)?;
        Ok(stored.and_then(|s| {
            Some(Hook {
                id: s.webhook_id.parse().ok()?,
                token: WebhookToken::new(s.token),
            })
        }))
    }

    async fn put(&self, channel: u64, hook: &Hook) -> Result<(), SinkError> {
        let stored = StoredWebhook {
            webhook_id: hook.id.to_string(),
            token: hook.token.expose().to_string(),
        };
        self.store
            .webhook_put(&self.account, &channel.to_string(), &stored)
            .await
            .map_err(unavailable)
    }

    async fn forget(&self, channel: u64, webhook: u64) -> Result<(), SinkError> {
        self.store
            .webhook_forget(&self.account, &channel.to_string(), &webhook.to_string())
            .await
            .map_err(unavailable)
    }

    async fn ours(&self) -> Result<Vec<u64>, SinkError> {
        let ids = self
            .store
            .webhook_ids(&self.account)
            .await
            .map_err(unavailable)?;
        Ok(ids.iter().filter_map(|id| id.parse().ok()).collect())
    }
}
