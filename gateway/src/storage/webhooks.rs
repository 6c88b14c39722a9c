//! The Discord webhooks of bots that several personas share (issue 46, migration 0017):
//! one per channel and bot account, so that restarts and replicas reuse it. A webhook's
//! token is a credential; it is stored here and nowhere else, and never logged.

use super::{Result, Store, now_ms, with_pool};

/// One channel's webhook, as stored: its id and token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWebhook {
    pub webhook_id: String,
    pub token: String,
}

impl Store {
    /// The webhook kept for `channel` of `account`.
    pub async fn webhook_get(&self, account: &str, channel: &str) -> Result<Option<StoredWebhook>> {
        let row: Option<(String, String)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT webhook_id, token FROM discord_webhooks WHERE account = $1 AND channel_id = $2",
            )
            .bind(account)
            .bind(channel)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row.map(|(webhook_id, token)| StoredWebhook { webhook_id, token }))
    }

    /// Keeps `hook` as `channel`'s webhook (replacing one kept before).
    pub async fn webhook_put(
        &self,
        account: &str,
        channel: &str,
        hook: &StoredWebhook,
    ) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO discord_webhooks (account, channel_id, webhook_id, token, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (account, channel_id)
                 DO UPDATE SET webhook_id = excluded.webhook_id, token = excluded.token,
                               created_at_ms = excluded.created_at_ms",
            )
            .bind(account)
            .bind(channel)
            .bind(&hook.webhook_id)
            .bind(&hook.token)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Forgets `channel`'s webhook if it is still `webhook_id` (another replica may have
    /// made a new one already).
    pub async fn webhook_forget(
        &self,
        account: &str,
        channel: &str,
        webhook_id: &str,
    ) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "DELETE FROM discord_webhooks WHERE account = $1 AND channel_id = $2 AND webhook_id = $3",
            )
            .bind(account)
            .bind(channel)
            .bind(webhook_id)
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Every webhook id kept for `account`.
    pub async fn webhook_ids(&self, account: &str) -> Result<Vec<String>> {
        let ids = with_pool!(self, pool => {
            sqlx::query_scalar("SELECT webhook_id FROM discord_webhooks WHERE account = $1")
                .bind(account)
                .fetch_all(pool)
                .await
        })?;
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // tests pick their database from the environment

    use super::super::test_support::{Kind, on_both_backends, run_with_store as run};
    use super::*;

    on_both_backends!(a_channel_keeps_one_webhook_until_it_is_forgotten);

    async fn a_channel_keeps_one_webhook_until_it_is_forgotten(store: Store) {
        let hook = StoredWebhook {
            webhook_id: "11".into(),
            token: "tok".into(),
        };
        assert_eq!(store.webhook_get("discord:1", "41").await.unwrap(), None);
        store.webhook_put("discord:1", "41", &hook).await.unwrap();
        assert_eq!(
            store.webhook_get("discord:1", "41").await.unwrap(),
            Some(hook.clone())
        );
        // Another account's channel is its own.
        assert_eq!(store.webhook_get("discord:2", "41").await.unwrap(), None);
        assert_eq!(store.webhook_ids("discord:1").await.unwrap(), vec!["11"]);
        // A stale forget (another webhook by now) changes nothing.
        store.webhook_forget("discord:1", "41", "99").await.unwrap();
        assert!(
            store
                .webhook_get("discord:1", "41")
                .await
                .unwrap()
                .is_some()
        );
        store.webhook_forget("discord:1", "41", "11").await.unwrap();
        assert_eq!(store.webhook_get("discord:1", "41").await.unwrap(), None);
    }
}
