//! Facts by id, for the console: a room's facts with the row id that deleting one needs,
//! and the delete itself. Listing and learning facts stay in `summaries`; this file only
//! adds what an operator's "delete this fact" needs, so the memories route keeps its shape.

use serde::Serialize;
use troupe_connectors::{AgentId, RoomKey};

use super::{Result, Store, with_pool};

/// A fact about one of a room's users, with its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct IdentifiedFact {
    pub id: i64,
    pub user_id: String,
    pub user_name: String,
    pub fact: String,
    /// The room it was learned in.
    pub room: RoomKey,
    pub created_at_ms: i64,
}

impl Store {
    /// The facts about the people who wrote in `room` (any room of the agent on its
    /// platform taught them), grouped by user, newest first within a user, with their ids.
    /// `room_user_facts` is this without the ids.
    pub async fn room_facts_with_ids(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
    ) -> Result<Vec<IdentifiedFact>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT f.id, f.user_id, COALESCE(u.name, f.user_id) AS user_name, f.fact,
                        f.room, f.created_at_ms
                 FROM user_facts f
                 LEFT JOIN users u ON u.platform = f.platform AND u.user_id = f.user_id
                 WHERE f.agent_id = $1 AND f.platform = $2
                   AND f.user_id IN (SELECT m.author_id FROM messages m
                                     WHERE m.agent_id = $1 AND m.room = $3 AND m.from_agent = $4)
                 ORDER BY f.user_id, f.created_at_ms DESC, f.id DESC",
            )
            .bind(agent_id)
            .bind(room.platform)
            .bind(room)
            .bind(false)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// Deletes one of the agent's facts. False when it has no fact with that id.
    pub async fn delete_fact(&self, agent_id: &AgentId, id: i64) -> Result<bool> {
        let done = with_pool!(self, pool => {
            sqlx::query("DELETE FROM user_facts WHERE agent_id = $1 AND id = $2")
                .bind(agent_id)
                .bind(id)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        Ok(done > 0)
    }
}
