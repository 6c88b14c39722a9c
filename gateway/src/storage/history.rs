//! What the console shows of a room's history beyond each message's text (issue 32): the
//! images a message carried, read back from the journal entry that brought it. Room memory
//! keeps only a line per image (`media::remembered`), never the bytes or a link a browser
//! could be sent to.

use troupe_connectors::{AgentId, RoomKey};

use super::{Result, Store, with_pool};

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

impl Store {
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
    use super::*;

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
