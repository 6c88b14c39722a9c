//! Media posted to the HTTP API, stored by the SHA-256 of the bytes (issue 32): the journal
//! and the bus carry the reference, the agent reads the bytes back when it handles the
//! message. Content addressing makes a second post of the same image one row.

use super::{Result, Store, now_ms, with_pool};

impl Store {
    /// Stores `bytes` under `sha256` (lower-case hex of their digest); the same bytes again
    /// change nothing.
    pub async fn media_put(&self, sha256: &str, mime: &str, bytes: &[u8]) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO media (sha256, mime, size, bytes, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (sha256) DO NOTHING",
            )
            .bind(sha256)
            .bind(mime)
            .bind(bytes.len() as i64)
            .bind(bytes)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Deletes what was stored before `before_ms`; returns how many were deleted. A message
    /// still waiting for its turn that refers to a deleted file is told the file is gone,
    /// like one whose platform file expired.
    pub async fn media_prune(&self, before_ms: i64) -> Result<u64> {
        let deleted = with_pool!(self, pool => {
            sqlx::query("DELETE FROM media WHERE created_at_ms < $1")
                .bind(before_ms)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        Ok(deleted)
    }

    /// The type and bytes stored under `sha256`, if any.
    pub async fn media_get(&self, sha256: &str) -> Result<Option<(String, Vec<u8>)>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, Vec<u8>)>(
                "SELECT mime, bytes FROM media WHERE sha256 = $1",
            )
            .bind(sha256)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Kind, on_both_backends, run_with_store as run};
    use super::*;

    on_both_backends!(stored_media_is_read_back_by_its_digest_and_kept_once);
    on_both_backends!(pruning_deletes_only_what_was_stored_before_the_cut);

    async fn pruning_deletes_only_what_was_stored_before_the_cut(store: Store) {
        let (_, old) = crate::media::reference(b"old bytes");
        store
            .media_put(&old, "image/png", b"old bytes")
            .await
            .unwrap();
        let cut = now_ms() + 1;
        // Stored after the cut: a later time than any `now_ms()` before it.
        let (_, new) = crate::media::reference(b"new bytes");
        with_pool!(&store, pool => {
            sqlx::query(
                "INSERT INTO media (sha256, mime, size, bytes, created_at_ms) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&new)
            .bind("image/png")
            .bind(9_i64)
            .bind(&b"new bytes"[..])
            .bind(cut + 1)
            .execute(pool)
            .await
            .map(|_| ())
        })
        .unwrap();
        assert_eq!(store.media_prune(cut).await.unwrap(), 1);
        assert_eq!(store.media_get(&old).await.unwrap(), None);
        assert!(store.media_get(&new).await.unwrap().is_some());
        assert_eq!(store.media_prune(cut).await.unwrap(), 0);
    }

    async fn stored_media_is_read_back_by_its_digest_and_kept_once(store: Store) {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let (_, key) = crate::media::reference(&bytes);
        assert_eq!(store.media_get(&key).await.unwrap(), None);
        store.media_put(&key, "image/png", &bytes).await.unwrap();
        store.media_put(&key, "image/png", &bytes).await.unwrap();
        assert_eq!(
            store.media_get(&key).await.unwrap(),
            Some(("image/png".to_string(), bytes))
        );
    }
}
