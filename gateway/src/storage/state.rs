//! Connector state: a small key-value store per (agent, platform), for the positions
//! connectors keep across restarts.

use super::{Result, Store, now_ms, with_pool};
use troupe_connectors::{AgentId, Platform};

impl Store {
    pub async fn connector_state_get(
        &self,
        agent_id: &AgentId,
        platform: Platform,
        key: &str,
    ) -> Result<Option<String>> {
        let value = with_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT value FROM connector_state WHERE agent_id = $1 AND platform = $2 AND key = $3",
            )
            .bind(agent_id)
            .bind(platform)
            .bind(key)
            .fetch_optional(pool)
            .await
        })?;
        Ok(value)
    }

    pub async fn connector_state_put(
        &self,
        agent_id: &AgentId,
        platform: Platform,
        key: &str,
        value: &str,
    ) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO connector_state (agent_id, platform, key, value, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (agent_id, platform, key)
                 DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(agent_id)
            .bind(platform)
            .bind(key)
            .bind(value)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }
}
