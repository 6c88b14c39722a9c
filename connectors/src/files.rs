//! Files a message carries on its platform (a photo, an image document, a voice note),
//! fetched by the connector that received the message, with its own client (issue 32).
//!
//! Why the connector and not the gateway's fetch policy: a platform's file is behind the
//! platform's own API (Telegram's file URL carries the bot token; Discord's CDN is Discord),
//! which the operator configured, like the API calls themselves. A link a stranger typed is
//! not a platform file: the gateway fetches it under its fetch policy.
//!
//! A message records such a file as an [`Attachment`](crate::Attachment) whose `url` is a
//! reference, never the bytes and never a URL carrying a token: Telegram's is
//! `telegram-file:<file_id>` ([`TELEGRAM_FILE`]); Discord's is its CDN URL. Bytes are
//! fetched when the message is handled, capped by the caller.

/// The `url` prefix of a Telegram file reference: `telegram-file:<file_id>`.
pub const TELEGRAM_FILE: &str = "telegram-file:";

/// Why a platform file was not fetched. The text names no URL (a file URL may carry a
/// token).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("it is over {cap} bytes")]
    TooLarge { cap: usize },
    #[error("{0}")]
    Failed(String),
}

/// Collects a download in memory and refuses it past `cap` bytes, as soon as a write would
/// cross the cap (so a 25 MB file stops at the cap, not after 25 MB).
#[cfg(feature = "telegram")]
pub(crate) struct Capped {
    pub bytes: Vec<u8>,
    pub cap: usize,
    pub over: bool,
}

#[cfg(feature = "telegram")]
impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            self.over = true;
            return std::task::Poll::Ready(Err(std::io::Error::other("over the cap")));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Reads a reqwest answer's body under `cap`, chunk by chunk.
#[cfg(feature = "discord")]
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, FileError> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(FileError::TooLarge { cap });
    }
    let mut out = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| FileError::Failed(format!("the download failed ({})", e.without_url())))?
    {
        if out.len().saturating_add(chunk.len()) > cap {
            return Err(FileError::TooLarge { cap });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(all(test, feature = "telegram"))]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    use tokio::io::AsyncWrite;

    #[test]
    fn a_download_stops_at_the_cap() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut into = Capped {
            bytes: Vec::new(),
            cap: 10,
            over: false,
        };
        let mut write = |buf: &[u8]| Pin::new(&mut into).poll_write(&mut cx, buf);
        assert!(matches!(write(b"0123456"), Poll::Ready(Ok(7))));
        assert!(matches!(write(b"789"), Poll::Ready(Ok(3))));
        assert!(matches!(write(b"a"), Poll::Ready(Err(_))));
        assert!(into.over);
        assert_eq!(into.bytes, b"0123456789");
    }
}
