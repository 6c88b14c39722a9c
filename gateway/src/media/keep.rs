//! Keeping images (issue 32): an image fetched from a platform or a link when its message
//! is handled is stored like one posted to the API, by the SHA-256 of its bytes in the
//! `media` table, and its journal entry is pointed at the stored copy, so the console's
//! history serves it (`GET …/history/{id}/images/{n}`) instead of only naming it. Stored
//! media is deleted after `TROUPE_MEDIA_KEEP_DAYS` ([`prune_now_and_then`], started by
//! whatever stores media, at most hourly). Keeping is best effort: a failure is logged and
//! the image still goes to the model.

use std::sync::atomic::{AtomicI64, Ordering};

use troupe_connectors::Attachment;

use super::STORED;
use crate::storage::{JournalId, Store};

/// When stored media was last pruned (ms since the epoch): at most once an hour, by whatever
/// stores media then, in a task of its own so that nobody waits for it.
static PRUNED_AT_MS: AtomicI64 = AtomicI64::new(0);
const PRUNE_EVERY_MS: i64 = 3_600_000;

/// Where a message's fetched images are kept: its journal entry, and how long stored media
/// lives (`TROUPE_MEDIA_KEEP_DAYS`).
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub journal: JournalId,
    pub keep_days: u32,
}

/// Stores the image `a` came as (`bytes`, of type `mime`, already capped and checked) and
/// points its journal entry at the copy. Nothing for an image already stored, or inline.
pub async fn keep(store: &Store, keep: Keep, a: &Attachment, mime: &str, bytes: &[u8]) {
    let Some(from) = a.url.as_deref() else {
        return;
    };
    if from.starts_with(STORED) || from.starts_with("data:") {
        return;
    }
    let (reference, key) = super::reference(bytes);
    let kept = async {
        store.media_put(&key, mime, bytes).await?;
        store
            .journal_keep_media(keep.journal, from, &reference, mime)
            .await
    };
    match kept.await {
        Ok(_) => prune_now_and_then(store, keep.keep_days),
        Err(error) => {
            tracing::warn!(%error, attachment = %a.name, "could not keep the image for the history")
        }
    }
}

/// Deletes media stored more than `keep_days` ago (`TROUPE_MEDIA_KEEP_DAYS`; 0 keeps all).
pub fn prune_now_and_then(store: &Store, keep_days: u32) {
    if keep_days == 0 {
        return;
    }
    let now = crate::clock::now_ms();
    let last = PRUNED_AT_MS.load(Ordering::Relaxed);
    if now - last < PRUNE_EVERY_MS
        || PRUNED_AT_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let store = store.clone();
    let before = now - i64::from(keep_days) * 86_400_000;
    tokio::spawn(async move {
        match store.media_prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, keep_days, "pruned old stored media"),
            Err(error) => tracing::warn!(%error, "could not prune old stored media"),
        }
    });
}
