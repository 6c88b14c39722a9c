//! What the console shows of a room's history beyond each message's text (issue 32): the
//! images a message carried, read back from the journal entry that brought it. Room memory
//! keeps only a line per image (`media::remembered`), never the bytes or a link a browser
//! could be sent to. An image fetched from a platform when its message was handled is
//! stored too, and its journal entry then points at the stored copy
//! ([`Store::journal_keep_media`]), so the history finds it as it finds a posted one.

use troupe_connectors::{AgentId, RoomKey};

use super::{JournalId, Pool, Result, Store, with_pool};

/// One image a remembered message carried and the `media` table holds (posted to the API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    pub sha256: String,
    pub mime: Option<String>,
}

/// The stored images of the inbound message `json` (the journal's copy), in order.
pub(crate) fn stored_images(json: &str) -> Vec<StoredImage> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let attachments = value.get("attachments").and_then(|a| a.as_array());
    attachments
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let url = a.get("url")?.as_str()?;
            let sha = url.strip_prefix("media:sha256:")?;
            let hex = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
            hex.then(|| StoredImage {
                sha256: sha.to_ascii_lowercase(),
                mime: a.get("mime").and_then(|m| m.as_str()).map(str::to_string),
            })
        })
        .collect()
}

/// `json` (an inbound message) with each attachment whose reference is `from` pointing at
/// the stored copy `to`, of type `mime`; `None` when none is.
fn pointed_at_stored(json: &str, from: &str, to: &str, mime: &str) -> Option<String> {
    let mut value: serde_json::Value = serde_json::from_str(json).ok()?;
    let attachments = value.get_mut("attachments")?.as_array_mut()?;
    let mut changed = false;
    for a in attachments {
        if a.get("url").and_then(|u| u.as_str()) == Some(from) {
            a["url"] = to.into();
            a["mime"] = mime.into();
            changed = true;
        }
    }
    changed.then(|| value.to_string())
}

impl Store {
    /// Points the attachments of journal entry `id` that refer to `from` (a platform's
    /// file, a link) at `to`, the copy of their bytes in the `media` table, with the type
    /// read from them. The history then shows the image (`room_images`), and a message
    /// driven again reads the stored copy instead of fetching it again. Returns whether the
    /// entry changed.
    pub async fn journal_keep_media(
        &self,
        id: JournalId,
        from: &str,
        to: &str,
        mime: &str,
    ) -> Result<bool> {
        let json: Option<(String,)> = with_pool!(self, pool => {
            sqlx::query_as("SELECT CAST(inbound AS TEXT) FROM journal WHERE id = $1")
                .bind(id.0)
                .fetch_optional(pool)
                .await
        })?;
        let Some(json) = json.and_then(|(json,)| pointed_at_stored(&json, from, to, mime)) else {
            return Ok(false);
        };
        // The column is JSONB on Postgres, TEXT on SQLite.
        let sql = match &self.pool {
            Pool::Sqlite(_) => "UPDATE journal SET inbound = $2 WHERE id = $1",
            Pool::Postgres(_) => "UPDATE journal SET inbound = $2::jsonb WHERE id = $1",
        };
        let updated = with_pool!(self, pool => {
            sqlx::query(sql)
                .bind(id.0)
                .bind(&json)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        Ok(updated == 1)
    }

    /// The stored images of the messages of `room` with an id of at least `from` that
    /// remember an image, by message id. Only messages whose text has an image line are
    /// read from the journal.
    pub async fn room_images(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        from: i64,
    ) -> Result<Vec<(i64, Vec<StoredImage>)>> {
        let rows: Vec<(i64, String)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT m.id, CAST(j.inbound AS TEXT) FROM messages m
                 JOIN journal j ON j.id = m.journal_id
                 WHERE m.agent_id = $1 AND m.room = $2 AND m.id >= $3
                   AND NOT m.from_agent AND m.text LIKE '%[image:%'",
            )
            .bind(agent_id)
            .bind(room)
            .bind(from)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(id, json)| (id, stored_images(&json)))
            .filter(|(_, images)| !images.is_empty())
            .collect())
    }

    /// The `n`th stored image of message `id` of `room`, with its type and bytes; `None`
    /// when there is no such message, image, or stored copy.
    pub async fn history_image(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        id: i64,
        n: usize,
    ) -> Result<Option<(String, Vec<u8>)>> {
        let Some((_, images)) = self
            .room_images(agent_id, room, id)
            .await?
            .into_iter()
            .find(|(m, _)| *m == id)
        else {
            return Ok(None);
        };
        let Some(image) = images.get(n) else {
            return Ok(None);
        };
        self.media_get(&image.sha256).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::JournalInsert;
    use super::super::test_support::{Kind, on_both_backends, run_with_store as run};
    use super::*;

    on_both_backends!(a_kept_image_is_pointed_at_in_the_journal);

    async fn a_kept_image_is_pointed_at_in_the_journal(store: Store) {
        let mut m = crate::rooms::tests::msg(troupe_connectors::Platform::Telegram, "look");
        m.attachments.push(troupe_connectors::Attachment {
            name: "photo.jpg".into(),
            mime: Some("image/*".into()),
            size: Some(10),
            url: Some("telegram-file:P-1".into()),
        });
        let agent = AgentId::new("keep");
        let JournalInsert::Inserted(id) = store.journal_insert(&agent, &m).await.unwrap() else {
            panic!("a new entry");
        };
        let stored = format!("media:sha256:{}", "ef".repeat(32));
        let keep = |from: &'static str| store.journal_keep_media(id, from, &stored, "image/jpeg");
        assert!(keep("telegram-file:P-1").await.unwrap());
        assert!(!keep("telegram-file:P-1").await.unwrap(), "already kept");
        let entry = store.journal_get(id).await.unwrap().unwrap();
        let a = &entry.inbound.attachments[0];
        assert_eq!(a.url.as_deref(), Some(stored.as_str()));
        assert_eq!(a.mime.as_deref(), Some("image/jpeg"));
        assert_eq!(entry.inbound.text, "look");
    }

    #[test]
    fn a_kept_platform_file_becomes_a_stored_image_of_the_history() {
        let sha = "cd".repeat(32);
        let stored = format!("media:sha256:{sha}");
        let json = serde_json::json!({"text": "look", "attachments": [
            {"name": "photo.jpg", "mime": "image/*", "url": "telegram-file:P-1"},
            {"name": "v.ogg", "mime": "audio/ogg", "url": "telegram-file:V-1"},
        ]})
        .to_string();
        let kept = pointed_at_stored(&json, "telegram-file:P-1", &stored, "image/jpeg").unwrap();
        let images = stored_images(&kept);
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].sha256, sha);
        assert_eq!(images[0].mime.as_deref(), Some("image/jpeg"));
        assert!(kept.contains("telegram-file:V-1"), "{kept}");
        assert!(pointed_at_stored(&json, "telegram-file:other", &stored, "image/png").is_none());
        assert!(pointed_at_stored("not json", "a", "b", "c").is_none());
    }

    #[test]
    fn only_stored_references_are_images_of_the_history() {
        let sha = "ab".repeat(32);
        let json = serde_json::json!({"attachments": [
            {"name": "a.png", "mime": "image/png", "url": format!("media:sha256:{sha}")},
            {"name": "b.png", "url": "https://cdn.example/b.png"},
            {"name": "c.png", "url": "media:sha256:../../etc"},
        ]})
        .to_string();
        let images = stored_images(&json);
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].sha256, sha);
        assert_eq!(images[0].mime.as_deref(), Some("image/png"));
        assert!(stored_images("not json").is_empty());
    }
}
