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

/// A connector's state in the database, scoped to its agent and platform: what the
/// topology hands each connector (and a shared bot its own, under its account).
pub struct StoredState {
    pub store: super::Store,
    pub agent_id: AgentId,
    pub platform: Platform,
}

#[async_trait::async_trait]
impl troupe_connectors::ConnectorState for StoredState {
    async fn get(&self, key: &str) -> Result<Option<String>, troupe_connectors::SinkError> {
        self.store
            .connector_state_get(&self.agent_id, self.platform, key)
            .await
            .map_err(|e| troupe_connectors::SinkError::Unavailable(e.to_string()))
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), troupe_connectors::SinkError> {
        self.store
            .connector_state_put(&self.agent_id, self.platform, key, value)
            .await
            .map_err(|e| troupe_connectors::SinkError::Unavailable(e.to_string()))
    }
}
