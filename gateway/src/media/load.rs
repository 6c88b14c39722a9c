//! Fetching a message's images when it is handled (issue 32): the journal and the bus
//! carried only references (see the parent module). Each image comes from where its
//! reference points: the `media` table (`media:sha256:<hex>`, an image posted to the API),
//! the platform through its connector's own client (a Telegram file, a Discord CDN file),
//! or a link under the fetch policy (a Farcaster embed, a picture link). Every path is
//! capped at `TROUPE_MEDIA_MAX_BYTES` and bounded in time (the fetch policy's timeout, the
//! connectors' clients' timeouts), and the type is read from the bytes. A failure is a
//! reason for the prompt and a log line naming the file, never its URL (a platform's file
//! URL may carry its token). An image fetched from a platform or a link is then kept for
//! the console's history (`super::keep`).

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use troupe_connectors::files::FileError;
use troupe_connectors::{Attachment, Connector, Inbound};

use super::{MediaError, STORED, check, describe, fetch_image, images, sees};
use crate::config::Vision;
use crate::fetch::Fetcher;
use crate::persona::PromptImage;
use crate::storage::Store;

/// What a message's images became for its prompt (see `super::attach`).
#[derive(Debug, Default)]
pub struct Seen {
    /// The images, for a model that takes them.
    pub images: Vec<PromptImage>,
    /// A description of each image, for a model that does not.
    pub unseen: Vec<String>,
    /// Why each image that could not be taken was not (with the file's name).
    pub refused: Vec<String>,
}

/// Where a message's images come from.
pub struct Sources<'a> {
    pub store: &'a Store,
    /// The persona's connector on the message's platform, when one is running.
    pub connector: Option<Arc<dyn Connector>>,
    pub fetcher: &'a Fetcher,
    pub vision: Vision,
    /// `TROUPE_MEDIA_MAX_BYTES`.
    pub cap: usize,
    /// Where fetched images are kept for the history; `None` keeps nothing.
    pub keep: Option<super::keep::Keep>,
}

/// The images of `inbound` for a prompt to `model`: fetched when the model takes images,
/// described when it does not, nothing at all with `TROUPE_VISION=off`.
pub async fn load(inbound: &Inbound, model: &str, sources: &Sources<'_>) -> Seen {
    let mut seen = Seen::default();
    if sources.vision == Vision::Off {
        return seen;
    }
    if !sees(sources.vision, model) {
        seen.unseen = images(inbound).map(describe).collect();
        return seen;
    }
    for a in images(inbound) {
        match one(a, sources).await {
            Ok((mime, bytes)) => seen.images.push(PromptImage {
                mime,
                base64: Arc::from(STANDARD.encode(&bytes)),
            }),
            Err(e) => {
                tracing::warn!(attachment = %a.name, "image not taken: {e}");
                seen.refused.push(format!("{} ({e})", a.name));
            }
        }
    }
    seen
}

/// One image's type and bytes.
async fn one(a: &Attachment, sources: &Sources<'_>) -> Result<(&'static str, Vec<u8>), MediaError> {
    let bytes = bytes(a, sources).await?;
    let mime = check(&bytes, sources.cap)?;
    if let Some(keep) = sources.keep {
        super::keep::keep(sources.store, keep, a, mime, &bytes).await;
    }
    Ok((mime, bytes))
}

/// The bytes of one attachment (an image, or audio for `super::voice`), from where its
/// reference points, under `TROUPE_MEDIA_MAX_BYTES`; their type is not checked here.
pub(super) async fn bytes(a: &Attachment, sources: &Sources<'_>) -> Result<Vec<u8>, MediaError> {
    let cap = sources.cap;
    let url = a.url.as_deref().unwrap_or_default();
    let bytes = if let Some(hex) = url.strip_prefix(STORED) {
        let stored = sources.store.media_get(hex).await.map_err(|e| {
            tracing::error!(error = %e, "reading a stored file failed");
            MediaError::Missing
        })?;
        stored.ok_or(MediaError::Missing)?.1
    } else if let Some(inline) = url.strip_prefix("data:") {
        // Messages journaled before images were stored by reference carried them inline.
        let (_, data) = inline.split_once(";base64,").ok_or(MediaError::BadBase64)?;
        super::decode_data(data, cap)?
    } else {
        let own = match &sources.connector {
            Some(connector) => connector.fetch_file(a, cap).await.map_err(|e| match e {
                FileError::TooLarge { cap } => MediaError::TooLarge { cap },
                FileError::Failed(why) => MediaError::Platform(why),
            })?,
            None => None,
        };
        match own {
            Some(bytes) => bytes,
            None => fetch_image(sources.fetcher, url, cap).await?,
        }
    };
    if bytes.len() > cap {
        return Err(MediaError::TooLarge { cap });
    }
    Ok(bytes)
}
