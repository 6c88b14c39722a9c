//! Facts a person told the persona to remember or forget, through the built-in tools
//! `memory.remember` and `memory.forget` (issue 33, `tools::builtin`). They live beside the
//! learned facts (`user_facts`, read back by `summaries::user_facts`) and are recalled the
//! same way, but they are written one at a time and do not move the extraction position:
//! the messages they came from are still read by the next extraction.
//!
//! The subject is always one user (`FactSubject`): the caller builds it from the message's
//! speaker, never from what the model asked for.

use troupe_connectors::RoomKey;

use super::{FactSubject, Result, Store, with_pool};

impl Store {
    /// Adds `fact` about `who`, learned in `room`, and keeps the newest `keep` of their
    /// facts. False when they already had exactly this fact.
    pub async fn remember_user_fact(
        &self,
        who: FactSubject<'_>,
        fact: &str,
        room: &RoomKey,
        keep: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let added = with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                let added = sqlx::query(
                    "INSERT INTO user_facts
                         (agent_id, platform, user_id, fact, room, source_message_id, created_at_ms)
                     VALUES ($1, $2, $3, $4, $5, NULL, $6)
                     ON CONFLICT (agent_id, platform, user_id, fact) DO NOTHING",
                )
                .bind(who.agent_id)
                .bind(who.platform)
                .bind(who.user_id)
                .bind(fact)
                .bind(room)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                sqlx::query(super::memory_sql::TRIM_USER_FACTS)
                .bind(who.agent_id)
                .bind(who.platform)
                .bind(who.user_id)
                .bind(keep.max(0))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok::<bool, sqlx::Error>(added > 0)
            }
            .await
        })?;
        Ok(added)
    }

    /// Forgets the facts about `who` (and the accounts linked with theirs) that read `fact`
    /// (ignoring ASCII case and the surrounding spaces), or that contain it when no fact
    /// reads it exactly. Returns the facts forgotten.
    pub async fn forget_user_fact(&self, who: FactSubject<'_>, fact: &str) -> Result<Vec<String>> {
        let wanted = fact.trim().to_ascii_lowercase();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // The facts of every account linked with theirs: a person forgets what they see.
        let person = self
            .person_of(who.agent_id, who.platform, who.user_id)
            .await?;
        let mut facts: Vec<(i64, String)> = Vec::new();
        for account in &person.accounts {
            let rows: Vec<(i64, String)> = with_pool!(self, pool => {
                sqlx::query_as(
                    "SELECT id, fact FROM user_facts
                     WHERE agent_id = $1 AND platform = $2 AND user_id = $3",
                )
                .bind(who.agent_id)
                .bind(account.platform)
                .bind(&account.user_id)
                .fetch_all(pool)
                .await
            })?;
            facts.extend(rows);
        }
        // Matched here rather than in SQL: `LIKE` and `lower()` differ between the backends
        // (wildcards in the text, case outside ASCII), and a user has few facts.
        let exact: Vec<&(i64, String)> = facts
            .iter()
            .filter(|(_, f)| f.trim().to_ascii_lowercase() == wanted)
            .collect();
        let chosen = if exact.is_empty() {
            facts
                .iter()
                .filter(|(_, f)| f.to_ascii_lowercase().contains(&wanted))
                .collect()
        } else {
            exact
        };
        let mut gone = Vec::new();
        for (id, text) in chosen {
            let done = with_pool!(self, pool => {
                sqlx::query("DELETE FROM user_facts WHERE id = $1 AND agent_id = $2")
                .bind(id)
                .bind(who.agent_id)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
            })?;
            if done > 0 {
                gone.push(text.clone());
            }
        }
        Ok(gone)
    }
}
